# C fields for queues/consumer.py when compiled (Cython pure-Python mode; the .py is the source).

cdef class Consumer:
    cdef public object tag, channel, queue, arguments, counters
    cdef public bint no_ack, exclusive
    cdef public object priority, prefetch
    cdef public Py_ssize_t unacked
