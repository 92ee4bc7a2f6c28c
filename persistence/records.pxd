# Types for persistence/records.py when compiled (Cython pure-Python mode; the .py is the source).
# A message record is built once per stored message on the group commit's thread: reading the
# message's fields as C, not through Python attribute lookups, is most of what it costs.

cimport cython

from leveret.model.message cimport Message as CMessage


@cython.locals(exchange_name=str, routing_key_name=str)
cpdef bytes encode_message(CMessage message)
