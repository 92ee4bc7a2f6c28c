"""Topic trie: fixed cases for RabbitMQ's word semantics, then hypothesis against a naive model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.exchanges import TopicMatcher
from leveret.exchanges.topic import split_topic_key


def naive_match(pattern: list[str], words: list[str]) -> bool:
    """Reference semantics, written independently of the trie."""
    if not pattern:
        return not words
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(naive_match(rest, words[i:]) for i in range(len(words) + 1))
    if not words:
        return False
    return (head == "*" or head == words[0]) and naive_match(rest, words[1:])


def words_of(key: str) -> list[str]:
    return [] if key == "" else key.split(".")


def matches(pattern: str, key: str) -> bool:
    m = TopicMatcher()
    q = object()
    m.bind(q, pattern, {})
    return list(m.route(key, None)) == [q]


@pytest.mark.parametrize(
    "pattern,key,expected",
    [
        ("a.b", "a.b", True),
        ("a.b", "a.b.c", False),
        ("a.*", "a.b", True),
        ("a.*", "a", False),
        ("a.*", "a.b.c", False),
        ("a.#", "a", True),
        ("a.#", "a.b.c", True),
        ("#", "", True),
        ("#", "a.b", True),
        ("*", "", False),  # "" is zero words in RabbitMQ's split_topic_key
        ("", "", True),
        ("", "a", False),
        ("*", "a", True),
        ("a.", "a.", True),  # trailing empty word
        ("a.*", "a.", True),
        ("a", "a.", False),
        ("*.*", ".", True),  # "." is two empty words
        ("*", ".", False),
        ("#.b.#", "b", True),
        ("#.b.#", "a.a.b.c", True),
        ("#.#", "", True),
        ("*.#.*", "a", False),
        ("*.#.*", "a.b", True),
        ("a*", "ab", False),  # wildcards are whole words only
        ("a*", "a*", True),
        ("#.*", "", False),
    ],
)
def test_rabbitmq_word_semantics(pattern, key, expected):
    assert matches(pattern, key) is expected
    assert naive_match(words_of(pattern), words_of(key)) is expected


def test_split_topic_key():
    assert split_topic_key("") == []
    assert split_topic_key("a") == ["a"]
    assert split_topic_key("a..b.") == ["a", "", "b", ""]


def test_cache_is_invalidated_by_bind_unbind_and_removal():
    m = TopicMatcher()
    q, r = object(), object()
    m.bind(q, "a.*", {})
    assert list(m.route("a.b", None)) == [q]
    m.bind(r, "#", {})
    assert list(m.route("a.b", None)) == [q, r]
    m.unbind(q, "a.*", {})
    assert list(m.route("a.b", None)) == [r]
    m.remove_destination(r)
    assert list(m.route("a.b", None)) == []


def test_cache_is_bounded_and_evicted_entries_recomputed():
    m = TopicMatcher(cache_size=3)
    q = object()
    m.bind(q, "k.*", {})
    for i in range(10):
        assert list(m.route(f"k.{i}", None)) == [q]
        assert len(m._cache) <= 3
    assert list(m.route("k.0", None)) == [q]
    assert list(m.route("j.0", None)) == []


def test_trie_nodes_are_pruned_on_unbind():
    m = TopicMatcher()
    q = object()
    m.bind(q, "a.b.c", {})
    m.bind(q, "a.x", {})
    m.unbind(q, "a.b.c", {})
    assert list(m._root.children) == ["a"]
    assert list(m._root.children["a"].children) == ["x"]
    m.unbind(q, "a.x", {})
    assert m._root.children == {}


def test_many_hashes_do_not_blow_up():
    m = TopicMatcher()
    q = object()
    m.bind(q, ".".join(["#"] * 30) + ".z", {})
    assert list(m.route(".".join(["a"] * 60), None)) == []
    assert list(m.route(".".join(["a"] * 60) + ".z", None)) == [q]


PATTERN_WORDS = st.sampled_from(["a", "b", "", "*", "#"])
KEY_WORDS = st.sampled_from(["a", "b", "", "c", "*", "#"])
patterns = st.lists(PATTERN_WORDS, max_size=5).map(".".join)
keys = st.lists(KEY_WORDS, max_size=6).map(".".join)

# An operation: ("bind"|"unbind", queue index, pattern index) or ("route", key).
# Patterns come from a small per-example pool so that unbinds hit real bindings.
ops = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["bind", "unbind"]), st.integers(0, 3), st.integers(0, 4)),
        st.tuples(st.just("route"), keys),
        st.tuples(st.just("remove"), st.integers(0, 3)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    pool=st.lists(patterns, min_size=1, max_size=5, unique=True),
    ops=ops,
    probe_keys=st.lists(keys, max_size=4),
    cache_size=st.integers(1, 8),
)
def test_trie_agrees_with_naive_model(pool, ops, probe_keys, cache_size):
    m = TopicMatcher(cache_size=cache_size)
    queues = [object() for _ in range(4)]
    model: set[tuple[int, str]] = set()

    def check(key: str) -> None:
        got = list(m.route(key, None))
        assert len(got) == len({id(q) for q in got}), "a destination routed twice"
        want = {i for i, p in model if naive_match(words_of(p), words_of(key))}
        assert {queues.index(q) for q in got} == want, (key, sorted(model))

    for op in ops:
        if op[0] == "bind":
            _, i, j = op
            p = pool[j % len(pool)]
            assert m.bind(queues[i], p, {}) is ((i, p) not in model)
            model.add((i, p))
        elif op[0] == "unbind":
            _, i, j = op
            p = pool[j % len(pool)]
            assert m.unbind(queues[i], p, {}) is ((i, p) in model)
            model.discard((i, p))
        elif op[0] == "remove":
            _, i = op
            gone = {b for b in model if b[0] == i}
            assert m.remove_destination(queues[i]) == len(gone)
            model -= gone
        else:
            check(op[1])
        assert len(m) == len(model)
        # Re-probe the same keys after every change: stale cache entries show up here.
        for key in probe_keys:
            check(key)
    for key in probe_keys:
        check(key)
        check(key)  # second time from the cache
