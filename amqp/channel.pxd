# C fields for amqp/channel.py when compiled (Cython pure-Python mode; the .py is the source).
# An extension type: a channel has these attributes and no others.

cdef class Channel:
    cdef public object connection, number, output, vhost, access, content
    cdef public bint closing, active
    cdef public object _publish_method, _publish
    cdef public object counted, exchange_stats, queue_stats, _queue_stats_prune_at
    cdef public Py_ssize_t _next_tag
    cdef public object _unacked, consumers, consumer_prefetch, global_prefetch
    cdef public Py_ssize_t _global_unacked
    cdef public bint _global_full
    cdef public object confirms, tx, tx_durable, last_queue_name, valid_properties
