"""Exchange types and routing.

Pure data structures, no I/O: one matcher per exchange type (``direct``,
``fanout``, ``topic``, ``headers``) holding one exchange's bindings behind the
:class:`~leveret.exchanges.binding.Matcher` interface, the
:class:`Exchange` record that owns a matcher, and :func:`route`, which follows
exchange-to-exchange bindings and alternate exchanges to the final queues.
"""

from .binding import Matcher, Routable
from .direct import DirectMatcher
from .exchange import EXCHANGE_TYPES, Exchange
from .fanout import FanoutMatcher
from .headers import HeadersMatcher
from .router import route
from .topic import TopicMatcher

__all__ = [
    "EXCHANGE_TYPES",
    "DirectMatcher",
    "Exchange",
    "FanoutMatcher",
    "HeadersMatcher",
    "Matcher",
    "Routable",
    "TopicMatcher",
    "route",
]
