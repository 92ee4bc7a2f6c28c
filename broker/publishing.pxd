# Types for broker/publishing.py when compiled (Cython pure-Python mode; the .py is the source).
# The one publish operation is cpdef: the AMQP channel's publish path (which cimports this
# module) calls it as C; every other front door calls it as before. An exchange's
# deduplication window is typed (cimported), so its check and admit are C calls.

cimport cython

from leveret.broker.dedupe cimport ExchangeDedupe as CExchangeDedupe
from leveret.model.message cimport Message as CMessage


# The message typed: its exchange and routing key, read for the route, are struct reads.
@cython.locals(window=CExchangeDedupe, window_key=bytes, expected=bint)
cpdef basic_publish(vhost, CMessage message, extra_routing_keys, mandatory, counters, origin, queues=*,
                    deduplicate=*)
