# C fields for amqp/unacked.py when compiled (Cython pure-Python mode; the .py is the source).
# An extension type: the channel (which cimports it) adds and settles a delivery with C calls.

cdef class UnackedMap:
    cdef public dict _by_tag

    cpdef add(self, tag, delivery)
    cpdef take_one(self, tag)
    cpdef list take(self, tag, multiple)
    cpdef list take_all(self)
