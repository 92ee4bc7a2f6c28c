# C fields for queues/plain_store.py when compiled (Cython pure-Python mode; the .py is the source).

cdef class PlainStore:
    cdef public object _owner, _sized, fresh, returned, tail
