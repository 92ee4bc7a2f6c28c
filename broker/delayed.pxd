# C types for broker/delayed.py when compiled (Cython pure-Python mode; the .py is the source).
# Extension types: a publish to a delayed exchange reads the exchange's schedule and the
# vhost's as C struct fields, and calls the walk for x-delay (exchanges/delayed.pxd), the
# scheduling and the group commit's enqueue (persistence/batch.pxd) as C.

cimport cython

cimport leveret.exchanges.delayed as delayed

from leveret.model.message cimport Message as CMessage
from leveret.persistence.batch cimport Recorder as CRecorder


cdef class DelayedExchange:
    cdef public object exchange, qid, timer, timer_due, read_from
    cdef public Delays delays
    cdef public Py_ssize_t count, released
    cdef public bint durable
    cdef public set releasing
    cdef public dict floors


cdef class Delays:
    cdef public object vhost, clock, lateness, _counter
    # The group commit (a Python subclass): its enqueue and batch number are C.
    cdef public CRecorder log
    cdef public Py_ssize_t release_rate
    cdef public dict by_name

    @cython.locals(dx=DelayedExchange)
    cpdef publish(self, CMessage message, extra_routing_keys, mandatory, counters, origin)

    @cython.locals(log=CRecorder, batch="long long", floors=dict)
    cpdef bint schedule(self, DelayedExchange dx, CMessage message, delay)

    cdef _watch(self, DelayedExchange dx, batch)
