# C types for broker/dedupe.py when compiled (Cython pure-Python mode; the .py is the source).
# An extension type: the publish path (broker/publishing.pxd cimports it) calls ``check`` and
# ``admit`` as C, and they reach the header reader (model/dedupe.pxd) and the window
# (model/dedupe_window.pxd) as C.

cimport cython

from leveret.model.dedupe cimport HeaderReader as CHeaderReader
from leveret.model.dedupe_window cimport Window as CWindow
from leveret.persistence.batch cimport Recorder as CRecorder


cdef class ExchangeDedupe:
    cdef public object settings, scope, _time, _ttl, _batches, _op, _ttl_header
    # The group commit: its batch number is a C field, read a publish.
    cdef public CRecorder _log
    cdef public CWindow window
    cdef public CHeaderReader reader
    cdef public long long _expires, _order, _batch
    cdef public Py_ssize_t duplicates
    cdef public list _keys, _expiries

    @cython.locals(key=bytes)
    cpdef check(self, message)

    @cython.locals(key=bytes)
    cpdef expect(self, message)

    @cython.locals(window=CWindow, now="long long")
    cpdef check_key(self, bytes key)

    @cython.locals(expires="long long", order="long long", window=CWindow)
    cpdef admit(self, bytes key)
