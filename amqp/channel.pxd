# C fields for amqp/channel.py when compiled (Cython pure-Python mode; the .py is the source).
# An extension type: a channel has these attributes and no others. The per-message methods
# are cpdef with the types their arguments and locals always have, so what they read of the
# connection, the consumer, the entry and its message is a struct access. The C types are
# cimported as C<name>, so the module's Python names stay what its source imports.

cimport cython

cimport leveret.amqp.fastpath as fastpath
from leveret.amqp.connection cimport Connection as CConnection
from leveret.amqp.held_output cimport ChannelOutput as CChannelOutput
from leveret.amqp.unacked cimport UnackedMap as CUnackedMap
from leveret.model.message cimport Message as CMessage
from leveret.queues.consumer cimport Consumer as CConsumer
from leveret.queues.entry cimport QueueEntry as CQueueEntry
from leveret.queues.queue cimport Queue as CQueue


cdef class Channel:
    cdef public CConnection connection
    cdef public CChannelOutput output
    cdef public object number, vhost, access, content
    cdef public bint closing, active
    cdef public object _publish_method, _publish
    cdef public object counted, exchange_stats, queue_stats, _queue_stats_prune_at
    cdef public Py_ssize_t _next_tag
    cdef public CUnackedMap _unacked
    cdef public object consumers, consumer_prefetch, global_prefetch
    cdef public Py_ssize_t _global_unacked
    cdef public bint _global_full
    cdef public object confirms, tx, tx_durable, last_queue_name, valid_properties

    cpdef handle_method(self, payload, index)
    cpdef handle_publish(self, method, header, body)
    cpdef ack(self, tag, multiple)
    cpdef list _take(self, tag, multiple, index)

    @cython.locals(conn=CConnection)
    cpdef has_room(self)

    @cython.locals(tag=Py_ssize_t, message=CMessage, conn=CConnection, frame=bytes)
    cpdef deliver(self, CConsumer consumer, CQueueEntry entry)

    @cython.locals(tag=Py_ssize_t, message=CMessage, conn=CConnection, content=bytes)
    cpdef deliver_shared(self, CConsumer consumer, CQueueEntry entry, shared)

    @cython.locals(message=CMessage, conn=CConnection)
    cpdef _delivered(self, CConsumer consumer, CQueueEntry entry, Py_ssize_t tag, bytes frame)

    @cython.locals(delivery=tuple, entry=CQueueEntry, queue=CQueue, consumer=CConsumer)
    cpdef ack_now(self, tag, multiple)
