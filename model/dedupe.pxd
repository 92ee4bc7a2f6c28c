# C types for model/dedupe.py when compiled (Cython pure-Python mode; the .py is the source).
# Extension types: the header reader and the window are on a deduplicated publish's path, so
# their fields are C struct slots, their per-publish methods cpdef (a C call from the
# exchange's window, broker/dedupe.pxd), and the table whose one field is the key is read
# with C integers through a pointer into the properties.

cimport cython
from libc.string cimport memcmp

from leveret.model.message cimport Message as CMessage

cdef bint COMPILED


cdef class HeaderReader:
    cdef public bytes _key, _head
    cdef public object _other
    cdef public Py_ssize_t _fixed

    @cython.locals(at=Py_ssize_t, raw=bytes)
    cpdef tuple read(self, CMessage message)

    @cython.locals(at=Py_ssize_t)
    cpdef sole(self, CMessage message)

    @cython.locals(at=Py_ssize_t, raw=bytes)
    cpdef key(self, CMessage message)

    @cython.locals(fixed=Py_ssize_t, n=Py_ssize_t, p="const unsigned char *", start=Py_ssize_t,
                   size=Py_ssize_t, length=Py_ssize_t, data=bytes, end=Py_ssize_t, i=Py_ssize_t,
                   key=bytes, q="char *", h="const unsigned char *")
    cpdef _alone(self, bytes raw, Py_ssize_t at)

    cpdef tuple _walk(self, bytes raw, Py_ssize_t at)
