# C types for model/dedupe_window.py when compiled (Cython pure-Python mode; the .py is the
# source). An extension type whose arrays are typed memoryviews (C arrays, no bounds checks:
# every index is masked), its per-publish methods cpdef (a C call from the exchange's window,
# broker/dedupe.pxd).

cimport cython

cdef long long _TOP
cdef int _HOME_SHIFT


cdef class Window:
    cdef public Py_ssize_t size
    cdef public long long floor
    cdef public bint timed
    cdef public long long _tagmask, _tail, _next
    cdef public Py_ssize_t _live, _rmask, _tmask
    cdef public long long[::1] _slots, _rtag, _rorder, _rexp
    cdef public list _rkeys

    cpdef _lay_out(self, Py_ssize_t capacity)

    cdef long long _tag(self, bytes key)

    @cython.locals(slots="long long[::1]", mask=Py_ssize_t, rmask=Py_ssize_t, high="long long",
                   i=Py_ssize_t, held="long long")
    cdef inline Py_ssize_t _probe(self, bytes key, long long tag)

    @cython.locals(i=Py_ssize_t)
    cdef Py_ssize_t _find(self, bytes key, long long tag)

    @cython.locals(i=Py_ssize_t, expires="long long")
    cpdef bint seen(self, bytes key, long long now)

    @cython.locals(tag="long long", slots="long long[::1]", rmask=Py_ssize_t,
                   i=Py_ssize_t, held="long long", ring="long long", old=Py_ssize_t,
                   at=Py_ssize_t, high="long long")
    cpdef add(self, bytes key, long long order, long long expires)

    @cython.locals(rtag="long long[::1]", slots="long long[::1]", rmask=Py_ssize_t,
                   mask=Py_ssize_t, ring="long long", at=Py_ssize_t, tag="long long",
                   i=Py_ssize_t, held="long long")
    cdef _evict(self)

    @cython.locals(slots="long long[::1]", mask=Py_ssize_t, j=Py_ssize_t, held="long long",
                   home=Py_ssize_t)
    cdef _delete(self, Py_ssize_t i)

    @cython.locals(rtag="long long[::1]", rorder="long long[::1]", rexp="long long[::1]",
                   rkeys=list, old_mask=Py_ssize_t, first="long long", end="long long",
                   slots="long long[::1]", mask=Py_ssize_t, rmask=Py_ssize_t, timed=bint,
                   ring=Py_ssize_t,
                   old="long long", at=Py_ssize_t, tag="long long", i=Py_ssize_t)
    cpdef _lay_out_again(self, Py_ssize_t capacity)

    @cython.locals(i=Py_ssize_t, at=Py_ssize_t)
    cpdef bint discard(self, bytes key)
