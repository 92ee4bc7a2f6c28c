# C fields for queues/entry.py when compiled (Cython pure-Python mode; the .py is the source).
# An extension type: no attributes beyond these; read and written from Python as before.

cdef class QueueEntry:
    cdef public long long seq
    cdef public object message
    cdef public Py_ssize_t delivery_count
    cdef public bint stored
    cdef public object expires_at
    cdef public object holder
    cdef public double delivered_at
