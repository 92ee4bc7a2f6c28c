# C fields for queues/consumer_ring.py when compiled (Cython pure-Python mode; the .py is the
# source). An extension type: the dispatch loop's turn and the queue's unpark on a settle are
# C calls, and what they read of the ring is a struct access.

cdef class ConsumerRing:
    cdef public list _levels, _keys, standby
    cdef public dict _by_priority, _members, parked
    cdef public Py_ssize_t active
    cdef public object use

    cpdef take_turn(self)
    cpdef bint unpark(self, consumer) except -1
