# C fields for queues/stream_cache.py when compiled (Cython pure-Python mode; the .py is the
# source). A page's entry is an extension type: readers and the channel read its fields as C;
# preparing one is a C call with a C splice (stream_header.pxd).

cimport cython

from leveret.model.message cimport Message as CMessage
from leveret.queues.stream_header cimport OffsetSplicer as COffsetSplicer

cdef class Prepared:
    cdef public long long seq, expires_at, frames_key
    cdef public object message, frames

@cython.locals(message=CMessage)
cpdef Prepared prepared(stored, COffsetSplicer splicer)
