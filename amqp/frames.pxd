# C types for amqp/frames.py when compiled (Cython pure-Python mode; the .py is the source).
# An extension type: a frame buffer has these attributes and no others. A frame's positions
# and head are C integers, its bytes are read through a C pointer into the buffer, and its
# payload is copied from the buffer into a new bytes at once (no memoryview slice per frame).

cimport cython

cdef bint COMPILED
cdef int _METHOD, _HEADER, _BODY, _HEARTBEAT, _PUBLISH, _NONE, _END
cdef Py_ssize_t _HEAD, _OVERHEAD, _PUBLISH_MIN, _HEADER_MIN

# A frame's head from the buffer's pointer, inlined where each of the two readers calls it;
# a C tuple back, so the three values never become Python objects (and no error check:
# reading seven bytes cannot raise).
@cython.locals(size=Py_ssize_t)
cdef inline (int, int, Py_ssize_t) _read_head(unsigned char *p, Py_ssize_t at) noexcept


cdef class FrameBuffer:
    cdef public bytearray _buf
    cdef public Py_ssize_t _skip, _at, frame_max
    cdef public int channel
    cdef public bytes payload, header, body

    cpdef append(self, data)

    cpdef compact(self)

    @cython.locals(buf=bytearray, pos=Py_ssize_t, avail=Py_ssize_t, p="unsigned char *",
                   ftype=int, channel=int, size=Py_ssize_t, limit=Py_ssize_t,
                   start=Py_ssize_t, stop=Py_ssize_t, body=Py_ssize_t)
    cpdef int next_frame(self) except -2

    @cython.locals(end=Py_ssize_t, p="unsigned char *", ftype=int, number=int,
                   size=Py_ssize_t, limit=Py_ssize_t, stop=Py_ssize_t,
                   body_size="unsigned long long", i=Py_ssize_t)
    cpdef Py_ssize_t _content(self, bytearray buf, Py_ssize_t at, int channel) except -1
