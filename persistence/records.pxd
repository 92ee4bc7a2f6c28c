# Types for persistence/records.py when compiled (Cython pure-Python mode; the .py is the source).
# A message record is built once per stored message on the group commit's thread: reading the
# message's fields as C, not through Python attribute lookups, is most of what it costs.

cimport cython
from libc.string cimport memcpy

from leveret.model.message cimport Message as CMessage


@cython.locals(exchange_name=str, routing_key_name=str)
cpdef bytes encode_message(CMessage message)


cdef bint COMPILED

@cython.locals(count=Py_ssize_t, timed=bint, total=Py_ssize_t, i=Py_ssize_t, each=Py_ssize_t,
               step=Py_ssize_t, tag=int, at=Py_ssize_t, end=Py_ssize_t, out_keys=list,
               out_values=list)
cpdef tuple encode_dedupe_runs(bytes scope, first, list keys, list expires)

# A deduplication run, laid out by C loops through pointers into the buffer and the keys.
@cython.locals(n=Py_ssize_t, size=Py_ssize_t, i=Py_ssize_t, pos=Py_ssize_t,
               length=Py_ssize_t, shift=int, expiry="unsigned long long", out=bytearray,
               q="unsigned char *", key=bytes, k="const unsigned char *")
cpdef bytes _laid_out_run(list keys, list expires, Py_ssize_t at, Py_ssize_t end, int tag)
