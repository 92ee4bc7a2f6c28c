# C fields for queues/consumer.py when compiled (Cython pure-Python mode; the .py is the source).
# A consumer's channel is always an AMQP channel (the queue's tests use stand-in consumers,
# not stand-in channels): typed, its credit check and delivery are C calls.

cimport cython

from leveret.amqp.channel cimport Channel as CChannel


cdef class Consumer:
    cdef public object tag, channel, queue, arguments, counters
    cdef public bint no_ack, exclusive
    cdef public object priority, prefetch
    cdef public Py_ssize_t unacked

    @cython.locals(channel=CChannel)
    cpdef can_take(self)

    @cython.locals(channel=CChannel)
    cpdef deliver(self, entry)

    @cython.locals(channel=CChannel)
    cpdef deliver_shared(self, entry, shared)
