# C fields for queues/dispatch.py when compiled (Cython pure-Python mode; the .py is the source).

cdef class Dispatcher:
    cdef public object ring, _continuation
    cdef public bint _dispatching, had_consumer, exclusive_consumer
    cdef public Py_ssize_t unacked, delivered, redelivered

    cpdef run(self, owner)
