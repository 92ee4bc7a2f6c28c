"""The management plane's pure parts: list parameters, the sampler, auth parsing,
binding properties keys and the Prometheus text writer."""

from __future__ import annotations

import base64

import pytest

from leveret.management_ui import auth, listing, prometheus, sampler, views
from leveret.management_ui.router import ApiError


class Obj:
    def __init__(self, name: str, n: int) -> None:
        self.name = name
        self.n = n


def fmt(o: Obj) -> dict:
    return {"name": o.name, "stats": {"n": o.n}}


OBJS = [Obj(f"q{i}", (i * 7) % 5) for i in range(10)]


def test_plain_list_and_columns():
    out = listing.respond_list({"columns": "stats.n"}, OBJS[:2], fmt)
    assert out == [{"stats": {"n": 0}}, {"stats": {"n": 2}}]


def test_page_formats_only_the_page():
    formatted = []

    def counting(o: Obj) -> dict:
        formatted.append(o)
        return fmt(o)

    out = listing.respond_list({"page": "2", "page_size": "3", "sort": "name"}, OBJS, counting,
                               {"name": lambda o: o.name})
    assert [d["name"] for d in out["items"]] == ["q3", "q4", "q5"]
    assert len(formatted) == 3
    assert (out["page_count"], out["total_count"], out["filtered_count"]) == (4, 10, 10)


def test_sort_by_nested_field_reverse_and_filters():
    out = listing.respond_list({"sort": "stats.n", "sort_reverse": "true", "name": "q1"},
                               OBJS, fmt)
    assert [d["name"] for d in out] == ["q1"]
    out = listing.respond_list({"sort": "stats.n", "sort_reverse": "true"}, OBJS, fmt)
    assert [d["stats"]["n"] for d in out] == sorted((o.n for o in OBJS), reverse=True)
    out = listing.respond_list({"name": "^q[27]$", "use_regex": "true"}, OBJS, fmt)
    assert [d["name"] for d in out] == ["q2", "q7"]


@pytest.mark.parametrize("query, error", [
    ({"page": "1", "page_size": "501"}, "invalid_pagination_parameters"),
    ({"page": "0"}, "invalid_pagination_parameters"),
    ({"page": "x"}, "invalid_pagination_parameters"),
    ({"page": "5", "page_size": "5"}, "page_out_of_range"),
])
def test_bad_pagination(query, error):
    with pytest.raises(ApiError) as info:
        listing.respond_list(query, OBJS, fmt)
    assert info.value.error == error and info.value.status == 400


def test_truthy_is_lenient():
    assert listing.truthy("true") and listing.truthy("True") and listing.truthy(True)
    assert not listing.truthy("false") and not listing.truthy("") and not listing.truthy(0)


def test_sampler_rates_and_samples():
    now = [1000.0]
    s = sampler.Sampler(clock=lambda: now[0])
    for i in range(5):
        s.record("publish", i * 50, now[0])
        s.record_object("conn", (i * 10, 0), now[0])
        s.end_round()
        now[0] += 5
    assert s.rate("publish") == 10.0
    assert s.object_rates("conn", 2) == [2.0, 0.0]
    now[0] -= 5  # just after the last round
    d = s.details("publish", age=20, incr=5)
    assert d["rate"] == 10.0 and len(d["samples"]) == 5 and d["avg_rate"] == 10.0
    assert d["samples"][0] == {"sample": 200, "timestamp": 1020000}
    assert [p["sample"] for p in d["samples"]] == [200, 150, 100, 50, 0]
    # On RabbitMQ's grid: a point every incr seconds back age seconds, 0 before the first.
    assert [p["sample"] for p in s.details("publish", age=30, incr=10)["samples"]] == [
        200, 100, 0, 0]
    s.end_round()  # "conn" not recorded this round: forgotten
    assert s.object_rates("conn", 2) == [0.0, 0.0]


def test_sampler_keeps_a_bounded_ring():
    s = sampler.Sampler()
    for i in range(sampler.KEEP * 3):
        s.record("x", i, float(i))
    assert len(s.series["x"]) == sampler.KEEP


def test_basic_auth_parsing_and_tags():
    header = "Basic " + base64.b64encode(b"guest:pa:ss").decode()
    assert auth.parse_basic(header) == ("guest", "pa:ss")
    for malformed in ("Basic !!!", "Basic \u00ff\u00fe",
                      "Basic " + base64.b64encode(b"no-colon").decode(), "Basic"):
        with pytest.raises(auth.MalformedCredentials):  # RabbitMQ: an empty 400
            auth.parse_basic(malformed)
    assert auth.parse_basic("Bearer x") is None
    assert auth.parse_basic("basic " + base64.b64encode(b"\xff:pw").decode()) is None
    assert auth.allowed(["administrator"], auth.MONITORING)
    assert auth.allowed(["monitoring"], auth.MANAGEMENT)
    assert not auth.allowed(["management"], auth.ADMINISTRATOR)
    assert not auth.allowed(["policymaker"], auth.MONITORING)


def test_properties_key():
    assert views.properties_key("", {}) == "~"
    assert views.properties_key("a.#", {}) == "a.%23"
    key = views.properties_key("k", {"a": 1})
    assert key.startswith("k~") and key == views.properties_key("k", {"a": 1})
    assert key != views.properties_key("k", {"a": 2})
    assert views.same_properties_key("a.%23", "a.#")


def test_prometheus_writer_format():
    w = prometheus.Writer()
    w.one("queues", "gauge", "Queues available", 3)
    w.family("queue_messages_ready", "gauge", "Ready",
             [((("vhost", "/"), ("queue", 'a"b\\c\nd')), 2)])
    w.one("leveret_x", "gauge", "Leveret only", 1.5)
    assert w.text() == (
        "# TYPE rabbitmq_queues gauge\n# HELP rabbitmq_queues Queues available\n"
        "rabbitmq_queues 3\n"
        "# TYPE rabbitmq_queue_messages_ready gauge\n# HELP rabbitmq_queue_messages_ready Ready\n"
        'rabbitmq_queue_messages_ready{vhost="/",queue="a\\"b\\\\c\\nd"} 2\n'
        "# TYPE leveret_x gauge\n# HELP leveret_x Leveret only\nleveret_x 1.5\n")


def test_name_regex_is_linear_and_caseless():
    """``^(a+)+$`` against a long run of a's that does not end the name: a backtracking
    engine tries every split of them (2**100 here); RE2 answers at once."""
    objs = [Obj("a" * 100 + "!", 0), Obj("AAAA", 1)]
    out = listing.respond_list({"name": "^(a+)+$", "use_regex": "true"}, objs, fmt)
    assert [d["name"] for d in out] == ["AAAA"]
    with pytest.raises(ApiError) as err:
        listing.respond_list({"name": "(?=a)", "use_regex": "true"}, objs, fmt)
    assert (err.value.status, err.value.reason) == (400, listing.INVALID_PATTERN)
