from leveret.exchanges import FanoutMatcher


def test_routes_everything_to_every_destination_once():
    m = FanoutMatcher()
    a, b = object(), object()
    m.bind(a, "", {})
    m.bind(b, "whatever", {})
    m.bind(b, "other", {})
    assert list(m.route("anything", {"h": 1})) == [a, b]
    assert m.route("x", None) is m.route("y", None)


def test_remove_destination_with_several_bindings():
    m = FanoutMatcher()
    a, b = object(), object()
    m.bind(a, "1", {})
    m.bind(a, "2", {})
    m.bind(b, "1", {})
    assert m.remove_destination(a) == 2
    assert list(m.route("", None)) == [b]
    m.unbind(b, "1", {})
    assert list(m.route("", None)) == []
