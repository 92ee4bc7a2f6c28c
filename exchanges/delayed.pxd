# C types for exchanges/delayed.py when compiled (Cython pure-Python mode; the .py is the source).
# Every publish to a delayed exchange walks its headers table for x-delay: the walk reads C
# integers through a pointer into the publisher's bytes and hands back C integers (a C
# tuple), so it allocates nothing but the 7-byte name it compares; broker/delayed.pxd
# cimports the entry points, so they are C calls.

cimport cython

cdef Py_ssize_t _NONE, _UNREAD, _LONG, _BAD
cdef int _FLAG_CONTENT_TYPE, _FLAG_CONTENT_ENCODING, _FLAG_HEADERS
cdef int _KEY_BITS
cdef unsigned long long _KEY_MASK, _KEY_MAX_DUE

@cython.locals(kind_at=Py_ssize_t, size=Py_ssize_t)
cpdef raw_delay(bytes raw)

@cython.locals(table_at=Py_ssize_t, kind_at=Py_ssize_t, size=Py_ssize_t)
cpdef find_delay(bytes raw)

@cython.locals(table_at=Py_ssize_t, kind_at=Py_ssize_t, size=Py_ssize_t)
cpdef raw_released(bytes raw, delay)

@cython.locals(grown=Py_ssize_t, table_len=Py_ssize_t)
cdef bytes _released(bytes raw, Py_ssize_t table_at, Py_ssize_t kind_at, Py_ssize_t size, delay)

@cython.locals(n=Py_ssize_t, p="const unsigned char *", flags=int, pos=Py_ssize_t,
               table_at=Py_ssize_t, end=Py_ssize_t, length=Py_ssize_t, key_end=Py_ssize_t,
               size=Py_ssize_t)
cdef (Py_ssize_t, Py_ssize_t, Py_ssize_t) _find(bytes raw)

@cython.locals(high=Py_ssize_t)
cdef inline Py_ssize_t _u32(const unsigned char *p, Py_ssize_t pos) noexcept

cdef inline Py_ssize_t _size_of(int kind) noexcept

@cython.locals(p="const unsigned char *", kind=int, pos=Py_ssize_t, word="long long",
               high="long long")
cdef _value(bytes raw, Py_ssize_t at, Py_ssize_t size)

@cython.locals(due="unsigned long long")
cpdef unsigned long long due_key(due_ms, unsigned long long counter) except? 0

cpdef unsigned long long due_of(unsigned long long key) noexcept
