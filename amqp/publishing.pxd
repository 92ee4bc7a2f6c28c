# Types for amqp/publishing.py when compiled (Cython pure-Python mode; the .py is the source).
# The publish path of a channel is always given an AMQP channel: typed, what it reads of it
# (access, connection, confirms, counters) is a struct access, and the broker's publish
# (cimported) a C call.

cimport cython

cimport leveret.broker.publishing as publishing
cimport leveret.model.properties as properties
from leveret.amqp.channel cimport Channel as CChannel
from leveret.model.message cimport Message as CMessage
from leveret.confirms.tracker cimport ConfirmTracker as CConfirmTracker
from leveret.persistence.batch cimport Recorder as CRecorder


cpdef complete(CChannel channel, publish, props, body)

# The property checks of every publish with properties: C calls, down to the list's walk.
@cython.locals(props=bytes, valid=dict)
cdef tuple _check_properties(CChannel channel, CMessage message)

cdef _check_well_formed(CChannel channel, bytes props)

# The confirm branch: the tracker numbers the message and the group commit (a Recorder)
# holds its confirm for the next commit, two C calls.
@cython.locals(confirms=CConfirmTracker, store_log=CRecorder)
cpdef publish_message(CChannel channel, message, mandatory, extra_routing_keys=*)
