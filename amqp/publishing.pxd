# Types for amqp/publishing.py when compiled (Cython pure-Python mode; the .py is the source).
# The publish path of a channel is always given an AMQP channel: typed, what it reads of it
# (access, connection, confirms, counters) is a struct access, and the broker's publish
# (cimported) a C call.

cimport leveret.broker.publishing as publishing
from leveret.amqp.channel cimport Channel as CChannel


cpdef complete(CChannel channel, publish, props, body)

cpdef publish_message(CChannel channel, message, mandatory, extra_routing_keys=*)
