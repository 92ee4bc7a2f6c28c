"""Policy validation, selection and precedence against queue arguments (queues/policy.py)."""

from __future__ import annotations

import pytest

from leveret.broker.vhost import VirtualHost
from leveret.persistence.group_commit import GroupCommit
from leveret.persistence.memory import MemoryStore
from leveret.queues.policy import Policy, PolicyError, queue_settings, select, validate
from leveret.queues.queue import Queue


def P(name: str, pattern: str = ".*", priority: int = 0, apply_to: str = "all",  # noqa: N802 - reads like a literal in the tables
      **definition: object) -> Policy:
    return validate("/", name, pattern, {k.replace("_", "-"): v for k, v in definition.items()},
                    priority, apply_to)


# -- selection -----------------------------------------------------------------------------

def test_pattern_is_searched_not_anchored():
    assert P("p", "q", max_length=1).applies_to("queues", "my-q-1")
    assert not P("p", "^q", max_length=1).applies_to("queues", "my-q-1")


def test_apply_to_restricts_kind():
    queues_only = P("p", apply_to="queues", max_length=1)
    assert queues_only.applies_to("queues", "a") and not queues_only.applies_to("exchanges", "a")
    both = P("p", apply_to="all", max_length=1)
    assert both.applies_to("exchanges", "a") and both.applies_to("queues", "a")


def test_highest_priority_wins_and_definitions_are_not_merged():
    low = P("low", priority=1, max_length=5, message_ttl=100)
    high = P("high", priority=2, max_length=10)
    assert select([low, high], "queues", "q") is high
    settings = queue_settings({}, select([low, high], "queues", "q"))
    assert settings.max_length == 10 and settings.message_ttl is None  # not merged


def test_non_matching_higher_priority_is_skipped_and_ties_are_deterministic():
    other = P("other", "^zzz", priority=9, max_length=1)
    b = P("b", max_length=2)
    a = P("a", max_length=3)
    assert select([other, b, a], "queues", "q") is a
    assert select([other, a, b], "queues", "q") is a
    assert select([other], "queues", "q") is None


# -- precedence ------------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "policy", "argument", "expected"), [
    ("max-length", 5, 10, 5),
    ("max-length", 5, 3, 3),
    ("max-length-bytes", 100, 1000, 100),
    ("message-ttl", 1000, 500, 500),
    ("expires", 60000, 10000, 10000),
    ("delivery-limit", 3, 7, 3),
    ("dead-letter-exchange", "pol-dlx", "arg-dlx", "arg-dlx"),
    ("dead-letter-routing-key", "pol", "arg", "arg"),
    ("overflow", "reject-publish", "drop-head", "drop-head"),
])
def test_classic_queue_resolution(key, policy, argument, expected):
    pol = validate("/", "p", ".*", {key: policy})
    settings = queue_settings({f"x-{key}": argument}, pol)
    assert getattr(settings, key.replace("-", "_")) == expected
    # Either side alone wins.
    assert getattr(queue_settings({}, pol), key.replace("-", "_")) == policy
    assert getattr(queue_settings({f"x-{key}": argument}, None), key.replace("-", "_")) == argument


def test_quorum_overflow_takes_the_policy():
    pol = P("p", overflow="reject-publish", max_length=4)
    args = {"x-queue-type": "quorum", "x-overflow": "drop-head", "x-max-length": 9}
    settings = queue_settings(args, pol)
    assert settings.overflow == "reject-publish" and settings.max_length == 4
    assert settings.queue_type == "quorum"


def test_policy_cannot_set_argument_only_keys():
    settings = queue_settings({"x-max-priority": 5}, P("p", max_length=1))
    assert settings.max_priority == 5 and settings.queue_type == "classic"


# -- validation (rabbitmqctl's texts) -----------------------------------------------------------

@pytest.mark.parametrize(("definition", "text"), [
    ({}, "no policy provided"),
    ({"foo": 1}, '[{<<"foo">>,1}] are not recognised policy settings'),
    ({"max-priority": 3}, '[{<<"max-priority">>,3}] are not recognised policy settings'),
    ({"max-length": -1}, "-1 is not a valid maximum length"),
    ({"max-length": "x"}, '<<"x">> is not a valid maximum length'),
    ({"message-ttl": 1.5}, "1.5 is not a valid message TTL"),
    ({"expires": 0}, "0 is not a valid queue expiry"),
    ({"overflow": "nope"}, '<<"nope">> is not a valid overflow value'),
    ({"dead-letter-exchange": 1}, "1 is not a valid dead letter exchange name"),
    ({"delivery-limit": "a"}, '<<"a">> is not a valid delivery limit'),
    ({"alternate-exchange": 1}, "1 is not a valid alternate exchange name"),
    ({"max-length-bytes": True}, "true is not a valid maximum length in bytes"),
])
def test_invalid_definitions(definition, text):
    with pytest.raises(PolicyError) as excinfo:
        validate("/", "p", ".*", definition)
    assert str(excinfo.value) == text


def test_invalid_apply_to_and_pattern():
    with pytest.raises(PolicyError, match="apply-to 'nope' unrecognised; should be 'queues', "
                                          "'exchanges' or 'all'"):
        validate("/", "p", ".*", {"max-length": 1}, apply_to="nope")
    with pytest.raises(PolicyError, match="pattern should be regular expression but is invalid"):
        validate("/", "p", "(", {"max-length": 1})

    with pytest.raises(PolicyError, match="pattern should be regular expression but is invalid"):
        validate("/", "p", "(a)\\1", {"max-length": 1})  # RE2: no backreferences


def test_patterns_match_in_linear_time():
    # Searched in every declared name; a backtracking engine takes 2**40 steps here.
    policy = P("p", "^(a+)+$", max_length=1)
    assert not policy.applies_to("queues", "a" * 40 + "!")
    assert policy.applies_to("queues", "aaa") and not P("p", "^Q", max_length=1).applies_to(
        "queues", "q")


# -- applied through a vhost -----------------------------------------------------------------------

def _vhost() -> tuple[VirtualHost, MemoryStore]:
    store = MemoryStore()
    return VirtualHost("/", GroupCommit(store)), store


def test_policies_apply_to_existing_and_new_entities_and_clear():
    vhost, store = _vhost()
    old = Queue(vhost, "jobs.old", arguments={"x-max-length": 100})
    vhost.add_queue(old)
    other = Queue(vhost, "other")
    vhost.add_queue(other)
    ex = vhost.declare_exchange("jobs.x", "direct", False, False, False, {})
    own = vhost.declare_exchange("jobs.own", "direct", False, False, False,
                                 {"alternate-exchange": "mine"})
    vhost.set_policy(P("jobs", "^jobs\\.", max_length=10, message_ttl=5000,
                       alternate_exchange="ae"))
    assert (old.settings.max_length, old.settings.message_ttl) == (10, 5000)
    assert other.settings.max_length is None
    assert ex.alternate_exchange == "ae"
    assert own.alternate_exchange == "mine"  # the argument wins
    assert vhost.default_exchange.alternate_exchange is None
    new = Queue(vhost, "jobs.new", arguments={"x-max-length": 3})
    vhost.add_queue(new)
    assert new.settings.max_length == 3
    new_ex = vhost.declare_exchange("jobs.y", "fanout", False, False, False, {})
    assert new_ex.alternate_exchange == "ae"
    # Persisted through the log; cleared everywhere at once.
    assert [p.name for p in store.load_definitions().policies] == ["jobs"]
    assert vhost.clear_policy("jobs") and not vhost.clear_policy("jobs")
    assert old.settings.max_length == 100 and old.settings.message_ttl is None
    assert ex.alternate_exchange is None and new_ex.alternate_exchange is None
    assert store.load_definitions().policies == []


def test_replacing_a_policy_reapplies_it():
    vhost, _ = _vhost()
    q = Queue(vhost, "q")
    vhost.add_queue(q)
    vhost.set_policy(P("p", max_length=1))
    vhost.set_policy(P("p", "^nomatch$", max_length=2))
    assert q.settings.max_length is None
