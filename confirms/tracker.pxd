# Types for confirms/tracker.py when compiled (Cython pure-Python mode; the .py is the source).
# Every publish on a channel in confirm mode numbers its message here: as an extension type
# the publish path calls it as C (amqp/publishing.pxd cimports it).

cdef class ConfirmTracker:
    cdef public set _held
    cdef public object _held_order
    cdef public list _acked, _nacked
    cdef public object next_seq, confirmed

    cpdef publish(self, bint hold=*)
    cpdef settle(self, seq, bint ok)
    cpdef settle_many(self, list seqs, bint ok)
    cpdef bint has_pending(self)
