# C fields for queues/stream_header.py when compiled (Cython pure-Python mode; the .py is the
# source). The splicer is an extension type: the page cache splices each entry it reads with a
# C call.

cdef class OffsetSplicer:
    cdef public object _raw
    cdef public bytes _head, _tail

    cpdef bytes splice(self, raw, offset)
