# C types for amqp/fastpath.py when compiled (Cython pure-Python mode; the .py is the source).
# The delivery encoder is cpdef, so the channel (which cimports this module) calls it as C,
# and its writer takes a C pointer into the buffer it fills: each fixed field is a store.

cimport cython


@cython.locals(ctag=bytes, exch=bytes, rkey=bytes, size=Py_ssize_t)
cpdef bytes encode_deliver_with_content(channel, consumer_tag, delivery_tag, redelivered,
                                        exchange, routing_key, raw_properties, body,
                                        frame_max, class_id=*)

cdef void _put_u32(unsigned char *out, Py_ssize_t pos, unsigned long long value) noexcept

cdef void _put_u64(unsigned char *out, Py_ssize_t pos, unsigned long long value) noexcept

@cython.locals(out=bytearray, p="unsigned char *", nprops=Py_ssize_t, size=Py_ssize_t,
               method_size=Py_ssize_t, total=Py_ssize_t, pos=Py_ssize_t, end=Py_ssize_t,
               ch_hi="unsigned char", ch_lo="unsigned char")
cdef bytes _deliver_frames(unsigned int channel, bytes ctag, unsigned long long delivery_tag,
                           bint redelivered, bytes exch, bytes rkey, bytes raw_properties,
                           body, unsigned int class_id)
