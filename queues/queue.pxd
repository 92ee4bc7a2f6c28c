# C fields for queues/queue.py when compiled (Cython pure-Python mode; the .py is the source).
# An extension type (a stream subclasses it in Python); weak references allowed. The C types
# are cimported as C<name>, so the module's Python names stay what its source imports.

cimport cython

from leveret.persistence.batch cimport Recorder as CRecorder
from leveret.queues.consumer_ring cimport ConsumerRing as CConsumerRing
from leveret.queues.dispatch cimport Dispatcher as CDispatcher
from leveret.queues.entry cimport QueueEntry as CQueueEntry


cdef class Queue:
    cdef object __weakref__
    cdef public object vhost, name, durable, exclusive_owner, auto_delete, arguments
    cdef public object settings, dedupe, time, paging, page_high, qid, log
    cdef public bint deleted
    cdef public object bound_exchanges, flow_waiters, ready
    cdef public CDispatcher dispatcher
    cdef public long long _next_seq
    cdef public object _delivered_below, _lease, _batches, _batch_no
    cdef public Py_ssize_t _published, _acked, _dropped

    @cython.locals(dispatcher=CDispatcher)
    cpdef publish(self, message)

    @cython.locals(dispatcher=CDispatcher, ring=CConsumerRing)
    cpdef settle(self, CQueueEntry entry)

    # A durable queue's log is the group commit (a Recorder): its per-message calls are C.
    @cython.locals(log=CRecorder)
    cpdef written(self, seq)

    @cython.locals(log=CRecorder)
    cpdef note_delivered(self, CQueueEntry entry)
