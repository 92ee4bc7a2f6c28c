# C declarations for amqp/fastpath.py when compiled (Cython pure-Python mode; the .py is the
# source). The delivery encoder is cpdef, so the channel (which cimports this module) calls it
# as C, without building a Python call per delivery.

cpdef bytes encode_deliver_with_content(channel, consumer_tag, delivery_tag, redelivered,
                                        exchange, routing_key, raw_properties, body,
                                        frame_max, class_id=*)

cpdef tuple decode_ack(payload)
