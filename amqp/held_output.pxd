# C fields for amqp/held_output.py when compiled (Cython pure-Python mode; the .py is the source).

cdef class HeldReply:
    cdef public object frame, failure
    cdef public bint ready

cdef class ChannelOutput:
    cdef public object connection, held, number
