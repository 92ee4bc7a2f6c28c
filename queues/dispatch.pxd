# C fields for queues/dispatch.py when compiled (Cython pure-Python mode; the .py is the source).

cimport cython

from leveret.queues.consumer_ring cimport ConsumerRing as CConsumerRing


cdef class Dispatcher:
    cdef public CConsumerRing ring
    cdef public object _continuation
    cdef public bint _dispatching, had_consumer, exclusive_consumer
    cdef public Py_ssize_t unacked, delivered, redelivered

    @cython.locals(ring=CConsumerRing)
    cpdef run(self, owner)
