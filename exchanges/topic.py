"""Topic exchange: binding keys are word patterns, matched by a trie.

Theory of operation
-------------------
Keys are split on ``.`` into words. In a binding key ``*`` matches exactly one
word and ``#`` matches zero or more; any other word (including ``a*`` or the
empty word) matches only itself. An empty key is *zero* words and ``"a."`` is
two words, ``"a"`` and ``""`` -- RabbitMQ's ``split_topic_key`` (in
``rabbit_db_topic_exchange.erl``) returns ``[]`` for ``<<>>`` and keeps empty
words elsewhere. So ``""`` is matched by the binding keys ``""`` and ``#``
but not ``*``.

Bindings are stored in a trie with one edge per binding-key word; each node
holds the destinations of the keys that end there. Matching walks the trie
with the routing key's words, following at each node the edge for the word
itself, the ``*`` edge, and the ``#`` edge (which may swallow any number of
words). A visited set over (node, word position) makes one match
O(trie nodes x words) even for patterns like ``#.#.#``, where a plain
backtracking walk is exponential. Emptied nodes are pruned on unbind.

Publishers reuse a small set of routing keys, so the result of each walk is
kept in a bounded per-exchange cache, cleared whenever the bindings change.
"""

from __future__ import annotations

from typing import Any

from .binding import BindingSet, BindingSetOwner, DestinationCounts

#: Routing keys whose results are cached per topic exchange. 4096 keys of at
#: most 255 bytes bound the cache near 1 MiB per exchange, and cover the key
#: sets of typical publishers; beyond it the oldest entry is evicted (FIFO).
TOPIC_CACHE_SIZE = 4096


def split_topic_key(key: str) -> list[str]:
    """Words of a routing or binding key; ``""`` is zero words (as RabbitMQ)."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("children", "dests")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.dests = DestinationCounts()


class TopicMatcher(BindingSetOwner):
    """The bindings of one topic exchange, as a word trie plus a result cache."""

    __slots__ = ("_cache", "_root", "_set", "cache_size")

    def __init__(self, cache_size: int = TOPIC_CACHE_SIZE) -> None:
        self._set = BindingSet()
        self._root = _Node()
        self._cache: dict[str, tuple[object, ...]] = {}
        self.cache_size = cache_size

    def bind(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool:
        if self._set.add(dest, routing_key, arguments) is None:
            return False
        node = self._root
        for word in split_topic_key(routing_key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = _Node()
            node = child
        node.dests.add(dest)
        self._cache.clear()
        return True

    def unbind(self, dest: object, routing_key: str, arguments: dict[str, Any]) -> bool:
        if self._set.remove(dest, routing_key, arguments) is None:
            return False
        self._forget(dest, routing_key)
        self._cache.clear()
        return True

    def remove_destination(self, dest: object) -> int:
        removed = self._set.remove_destination(dest)
        for _, routing_key, _ in removed:
            self._forget(dest, routing_key)
        if removed:
            self._cache.clear()
        return len(removed)

    def _forget(self, dest: object, routing_key: str) -> None:
        """Drop one reference to ``dest`` at the key's node and prune emptied nodes."""
        path = [(self._root, "")]
        for word in split_topic_key(routing_key):
            path.append((path[-1][0].children[word], word))
        path[-1][0].dests.discard(dest)
        for depth in range(len(path) - 1, 0, -1):
            node, word = path[depth]
            if node.children or node.dests:
                break
            del path[depth - 1][0].children[word]

    def route(self, routing_key: str, headers: dict[str, Any] | None) -> tuple[object, ...]:
        cached = self._cache.get(routing_key)
        if cached is not None:
            return cached
        found: dict[int, object] = {}
        self._walk(self._root, split_topic_key(routing_key), 0, found, set())
        result = tuple(found.values())
        if len(self._cache) >= self.cache_size:
            del self._cache[next(iter(self._cache))]
        self._cache[routing_key] = result
        return result

    def _walk(
        self,
        node: _Node,
        words: list[str],
        i: int,
        found: dict[int, object],
        seen: set[tuple[int, int]],
    ) -> None:
        state = (id(node), i)
        if state in seen:
            return
        seen.add(state)
        children = node.children
        if i == len(words):
            for dest in node.dests.snapshot:
                found.setdefault(id(dest), dest)
            hash_child = children.get("#")
            if hash_child is not None:
                self._walk(hash_child, words, i, found, seen)
            return
        child = children.get(words[i])
        if child is not None:
            self._walk(child, words, i + 1, found, seen)
        child = children.get("*")
        if child is not None:
            self._walk(child, words, i + 1, found, seen)
        child = children.get("#")
        if child is not None:
            for j in range(i, len(words) + 1):
                self._walk(child, words, j, found, seen)

    @staticmethod
    def validate_binding(routing_key: str, arguments: dict[str, Any]) -> None:
        """Any binding key is a valid pattern in RabbitMQ; nothing to check."""
