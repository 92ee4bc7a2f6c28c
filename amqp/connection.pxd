# C fields for amqp/connection.py when compiled (Cython pure-Python mode; the .py is the source).
# An extension type: a connection has these attributes and no others. Its channels are
# typed, so handing them a frame is a C call.

cimport cython

from leveret.amqp.channel cimport Channel as CChannel
from leveret.amqp.frames cimport FrameBuffer as CFrameBuffer

cdef int _METHOD, _HEARTBEAT, _PUBLISH, _NONE


cdef class Connection:
    cdef public object broker, config, peer, local, name, on_output, clock, state, out
    cdef public CFrameBuffer _frames
    cdef public object _header, channels, closing_channels, _flush_channels
    cdef public object exclusive_queues, vhost, user, peer_cert_user, tls_info
    cdef public object client_properties, auth_mechanism, frame_max, channel_max, heartbeat
    cdef public object last_received, last_sent, close_deadline, flow_queues, on_flow_release
    cdef public bint input_pending, want_close, reading, peer_closes, blocked, has_published
    cdef public bint writable, released, batch_full
    cdef public object recv_oct, recv_cnt, send_oct, send_cnt, connected_at
    cdef public Py_ssize_t batch_bytes

    cpdef write(self, data)

    @cython.locals(frames=CFrameBuffer, ftype=int, _turn=Py_ssize_t)
    cpdef receive_data(self, data)

    @cython.locals(channel=CChannel)
    cpdef _on_publish(self, number, method, header, body)

    @cython.locals(channel=CChannel)
    cpdef _on_method(self, number, payload)
