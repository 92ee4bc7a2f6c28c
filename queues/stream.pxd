# C fields for queues/stream.py when compiled (Cython pure-Python mode; the .py is the source).
# A stream is an extension subclass of the queue: its publish and settle override the
# queue's C methods, and its fields are C reads on the publish and delivery paths.

from leveret.queues.entry cimport QueueEntry as CQueueEntry
from leveret.queues.queue cimport Queue


cdef class Stream(Queue):
    cdef public object _index, _pages, _readers, _tracked
    cdef public long long _committed, _chunk_ts

    cpdef publish(self, message)

    cpdef settle(self, CQueueEntry entry)
