# C types for model/dedupe_window.py when compiled (Cython pure-Python mode; the .py is the
# source). An extension type whose arrays are typed memoryviews (C arrays, no bounds checks:
# every index is masked), whose keys are copied and compared through pointers into the
# arena, and whose per-publish methods are cpdef (a C call from the exchange's window,
# broker/dedupe.pxd).

cimport cython
from libc.string cimport memcmp, memcpy

cdef extern from *:
    """
    /* Ask the CPU for a cache line that will be written soon (a no-op where unsupported). */
    #if defined(__GNUC__) || defined(__clang__)
    #define _leveret_prefetch(p) __builtin_prefetch((p), 1, 3)
    #else
    #define _leveret_prefetch(p) ((void)(p))
    #endif
    """
    void _prefetch "_leveret_prefetch"(const void *p)

cdef bint COMPILED
cdef long long _TOP
cdef int _HOME_SHIFT
cdef int _LENGTH_BITS
cdef long long _LENGTH_MASK
cdef long long _MAX_OFFSET


cdef class Window:
    cdef public Py_ssize_t size
    cdef public long long floor
    cdef public bint timed
    cdef public long long _tagmask, _tail, _next, _ahead
    cdef public Py_ssize_t _live, _rmask, _tmask, _amask
    cdef public long long[::1] _slots, _rtag, _rorder, _rkey, _rexp
    cdef public bytearray _arena
    cdef public bytes _hint
    cdef public Py_ssize_t _hint_at
    cdef public long long _hint_tag

    cpdef _lay_out(self, Py_ssize_t capacity, Py_ssize_t arena)

    cdef long long _tag(self, bytes key)

    @cython.locals(word="long long", n=Py_ssize_t, pos=Py_ssize_t, a="unsigned char *",
                   k="const unsigned char *", same=bint)
    cdef inline bint _is(self, Py_ssize_t at, bytes key)

    @cython.locals(mask=Py_ssize_t, rmask=Py_ssize_t, high="long long", i=Py_ssize_t,
                   held="long long")
    cdef inline Py_ssize_t _probe(self, bytes key, long long tag)

    @cython.locals(i=Py_ssize_t)
    cdef Py_ssize_t _find(self, bytes key, long long tag)

    cpdef expect(self, bytes key)

    @cython.locals(i=Py_ssize_t, expires="long long", tag="long long", held="long long")
    cpdef bint seen(self, bytes key, long long now)

    @cython.locals(tag="long long", rmask=Py_ssize_t,
                   i=Py_ssize_t, held="long long", ring="long long", at=Py_ssize_t,
                   high="long long", n=Py_ssize_t, start="long long", pos=Py_ssize_t,
                   a="unsigned char *", k="const unsigned char *")
    cpdef add(self, bytes key, long long order, long long expires)

    @cython.locals(start="long long", size=Py_ssize_t, pos=Py_ssize_t, oldest="long long",
                   held=Py_ssize_t)
    cdef long long _room(self, Py_ssize_t n) except -1

    @cython.locals(total=Py_ssize_t, rmask=Py_ssize_t, ring="long long", at=Py_ssize_t)
    cdef Py_ssize_t _live_bytes(self)

    @cython.locals(rmask=Py_ssize_t, mask=Py_ssize_t, ring="long long", at=Py_ssize_t,
                   tag="long long", i=Py_ssize_t, held="long long")
    cdef _evict(self)

    @cython.locals(mask=Py_ssize_t, j=Py_ssize_t, held="long long", home=Py_ssize_t)
    cdef _delete(self, Py_ssize_t i)

    @cython.locals(rtag="long long[::1]", rorder="long long[::1]", rexp="long long[::1]",
                   rkey="long long[::1]", old_arena=bytearray, old_amask=Py_ssize_t,
                   old_mask=Py_ssize_t, first="long long", end="long long",
                   slots="long long[::1]", mask=Py_ssize_t, rmask=Py_ssize_t, timed=bint,
                   ring=Py_ssize_t, ahead=Py_ssize_t, word="long long", n=Py_ssize_t,
                   pos=Py_ssize_t, old="long long", at=Py_ssize_t, tag="long long",
                   i=Py_ssize_t)
    cpdef _lay_out_again(self, Py_ssize_t capacity, Py_ssize_t arena)

    @cython.locals(word="long long", pos=Py_ssize_t)
    cdef bytes _key(self, Py_ssize_t at)

    @cython.locals(i=Py_ssize_t)
    cpdef bint discard(self, bytes key)
