# C fields for queues/queue.py when compiled (Cython pure-Python mode; the .py is the source).
# An extension type (a stream subclasses it in Python); weak references allowed.

cdef class Queue:
    cdef object __weakref__
    cdef public object vhost, name, durable, exclusive_owner, auto_delete, arguments
    cdef public object settings, dedupe, time, paging, page_high, qid, log
    cdef public bint deleted
    cdef public object bound_exchanges, flow_waiters, ready, dispatcher
    cdef public long long _next_seq
    cdef public object _delivered_below, _lease, _batches, _batch_no
    cdef public Py_ssize_t _published, _acked, _dropped
