# C fields for model/message.py when compiled (Cython pure-Python mode; the .py is the source).

cdef class Message:
    cdef public object exchange, routing_key, raw_properties, body, store_id
    cdef public object _props, _peeked
