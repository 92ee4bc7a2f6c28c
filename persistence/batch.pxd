# Types for persistence/batch.py when compiled (Cython pure-Python mode; the .py is the source).
# A persistent publish records an Enqueue and an ack a Remove, on the loop thread; the group
# commit's thread reads them back. As extension types, building one is an allocation and
# reading it a struct access, and the recorder's per-message methods are C calls (group
# commit is a Python subclass: its own attributes live in its __dict__).

cimport cython

from leveret.model.message cimport Message as CMessage

cdef class Enqueue:
    cdef public object qid, seq, message, delivery_count, expires_at
    cdef public bint transient, cancelled

cdef class Remove:
    cdef public object qid, seq

cdef class Recorder:
    cdef public object next_msg_id, next_qid, last_seq, _qids
    cdef public list _ops
    cdef public dict _pending, _below, _dedupe, _held
    cdef public Py_ssize_t _live, _recorded_ops
    cdef public long long batch
    cdef public bint _scheduled, _writing

    cdef _recorded(self, Py_ssize_t count=*)
    cdef _add(self, op)
    cpdef bint has_pending(self)
    cpdef hold(self, channel, seq)
    @cython.locals(op=Enqueue)
    cpdef enqueue(self, qid, seq, CMessage message, transient=*, expires_at=*, cluster=*)
    cpdef mark_delivered(self, qid, seq, message, delivery_count)
    cpdef mark_delivered_below(self, qid, below)
    cpdef remove(self, qid, seq, message=*)
    cpdef remove_many(self, qid, list seqs)
