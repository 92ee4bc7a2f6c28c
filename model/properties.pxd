# C types for model/properties.py when compiled (Cython pure-Python mode; the .py is the source).
# A publish's property list is checked before it is relayed: the flag word, positions and
# lengths are C integers read through a C pointer into the publisher's bytes, so a list the
# channel has not seen before (a new message-id on every row) costs a few hundred
# instructions, not a few thousand.

cimport cython

cdef bint COMPILED
cdef dict _PLANS  # a dict lookup, not a method call

@cython.locals(end=Py_ssize_t, flags=int, pos=Py_ssize_t, kind=int,
               p="const unsigned char *")
cpdef check_properties(bytes raw)

@cython.locals(in_table=bint, stop=Py_ssize_t, key_end=Py_ssize_t, code=int,
               inner=Py_ssize_t)
cdef Py_ssize_t _check_table(bytes raw, Py_ssize_t pos, Py_ssize_t end) except -1
