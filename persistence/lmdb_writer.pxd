# Types for persistence/lmdb_writer.py when compiled (Cython pure-Python mode; the .py is the
# source). The group commit's thread writes every persistent message's record and index entry
# here and removes them on its ack: as an extension type the writer's own state is struct
# fields, an Enqueue (cimported) and its message are read as C, and the record is built by a
# C call (records is cimported).

cimport cython

cimport leveret.persistence.records as records
from leveret.model.message cimport Message as CMessage
from leveret.persistence.batch cimport Enqueue as CEnqueue


cdef class LmdbWriter:
    cdef public object txn, spend, meta, defs, messages, refs_db, index, transient, dedupe
    cdef public dict refs, counters
    cdef public set counted
    cdef public object _first_new, _last_qid, _last_seq, _last_dropped
    cdef public list _fresh_message_keys, _fresh_messages, _fresh_index_keys, _fresh_index
    cdef public object _index_cursor, _messages_cursor, _refs_on_disk
    cdef public double _near_spent
    cdef public bint dropped

    cpdef refcount(self, msg_id, bint has_entry)

    @cython.locals(message=CMessage, counter=list)
    cpdef put_entry(self, CEnqueue op)

    cpdef _write_fresh(self)

    @cython.locals(counter=list, near=double)
    cpdef remove_entry(self, qid, seq)
