# C fields for queues/plain_store.py when compiled (Cython pure-Python mode; the .py is the source).
# A durable queue's log is the group commit, a Recorder, and its owner a queue: typed, recording
# an enqueue and reading the queue's fields are C.

cimport cython

from leveret.persistence.batch cimport Recorder as CRecorder
from leveret.queues.queue cimport Queue as CQueue


cdef class PlainStore:
    cdef public object _owner, _sized, fresh, returned, tail

    @cython.locals(log=CRecorder, owner=CQueue)
    cpdef enqueue(self, seq, message)
