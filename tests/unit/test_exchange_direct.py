from leveret.exchanges import DirectMatcher


def test_routes_exact_key_only():
    m = DirectMatcher()
    a, b = object(), object()
    m.bind(a, "k", {})
    m.bind(b, "k2", {})
    assert list(m.route("k", None)) == [a]
    assert list(m.route("k2", None)) == [b]
    assert list(m.route("K", None)) == []
    assert list(m.route("", None)) == []


def test_empty_key_is_a_key():
    m = DirectMatcher()
    a = object()
    m.bind(a, "", {})
    assert list(m.route("", None)) == [a]
    assert list(m.route("x", None)) == []


def test_result_is_precomputed_and_in_bind_order():
    m = DirectMatcher()
    qs = [object() for _ in range(3)]
    for q in qs:
        m.bind(q, "k", {})
    first = m.route("k", None)
    assert first is m.route("k", None)  # no per-call allocation
    assert list(first) == qs
    m.unbind(qs[1], "k", {})
    assert list(m.route("k", None)) == [qs[0], qs[2]]


def test_headers_are_ignored():
    m = DirectMatcher()
    a = object()
    m.bind(a, "k", {"x-match": "any", "h": 1})
    assert list(m.route("k", {"h": 2})) == [a]
