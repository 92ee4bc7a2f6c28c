# C fields for queues/stream_reader.py when compiled (Cython pure-Python mode; the .py is the
# source). The consumer stays untyped: the stream's unit tests read with stand-in consumers.

cimport cython

from leveret.queues.dispatch cimport Dispatcher as CDispatcher
from leveret.queues.entry cimport QueueEntry as CQueueEntry
from leveret.queues.queue cimport Queue as CQueue
from leveret.queues.stream_cache cimport Prepared as CPrepared


cdef class Reader:
    cdef public object consumer, window, ahead, filters
    cdef public long long position, min_ts
    cdef public bint match_unfiltered

    @cython.locals(shared=CPrepared)
    cpdef deliver_run(self, CDispatcher dispatcher, CQueue queue, bint share_frames)
    @cython.locals(entry=CQueueEntry)
    cpdef deliver(self, CDispatcher dispatcher, CPrepared shared, bint share_frames)
