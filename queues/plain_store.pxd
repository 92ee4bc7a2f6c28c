# C fields for queues/plain_store.py when compiled (Cython pure-Python mode; the .py is the source).
# A durable queue's log is the group commit, a Recorder: typed, recording an enqueue is a C call.

cimport cython

from leveret.persistence.batch cimport Recorder as CRecorder


cdef class PlainStore:
    cdef public object _owner, _sized, fresh, returned, tail

    @cython.locals(log=CRecorder)
    cpdef enqueue(self, seq, message)
