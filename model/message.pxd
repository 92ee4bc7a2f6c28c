# C fields for model/message.py when compiled (Cython pure-Python mode; the .py is the source).

cimport cython

cdef int _CT, _CE, _HD, _DM, _PR, _CI, _RT, _EX

cdef class Message:
    cdef public object exchange, routing_key, raw_properties, body, store_id
    cdef public object _props, _peeked

    # What every property below reads (a persistent publish asks ``persistent`` once in its
    # queue's store): a C call, not a method looked up and called through Python.
    cdef tuple _peek(self)


# Every persistent publish peeks once (delivery mode, priority, expiration): C integers.
@cython.locals(flags=int, pos=Py_ssize_t, headers_at=Py_ssize_t, mode=int, prio=int)
cpdef tuple _peek_properties(raw)
