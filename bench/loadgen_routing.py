"""Scenarios of one exchange over many queues: ``fanout`` (every message to every queue)
and ``topic`` (a seeded set of wildcard bindings and random routing keys: the routing cost).

The publisher is held back while more than ``max_backlog`` deliveries are owed, so short
runs measure the steady state and not the drain of a burst.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pamqp.commands as cmd
from loadgen_client import BrokerClosed, Conn, as_text, connect, open_channel
from loadgen_measure import Config, measure
from loadgen_peers import Consumer, Publisher, encode_publish


class CountSum:
    """Looks like a Consumer to :func:`measure`: ``count`` sums several consumers."""

    def __init__(self, consumers: list[Consumer]) -> None:
        self.consumers = consumers

    @property
    def count(self) -> int:
        return sum(c.count for c in self.consumers)


class PoolPublisher(Publisher):
    """Like :class:`Publisher`, but cycles through a list of pre-encoded batches
    (each batch = ``batch`` publishes with different routing keys)."""

    def __init__(self, conn: Conn, payloads: list[bytes], batch: int) -> None:
        super().__init__(conn, payloads[0], 1)
        self.payloads = payloads
        self.batch = batch

    async def run(self) -> None:
        conn, payloads, batch = self.conn, self.payloads, self.batch
        write = conn.transport.write
        sleep = asyncio.sleep
        i, n = 0, len(payloads)
        try:
            while not self.stopped:
                if conn.paused:
                    await conn.wait_writable()
                    continue
                if self.gate is not None:
                    await self.gate()
                if conn.lost.done():
                    raise BrokerClosed("publisher connection lost")
                write(payloads[i])
                i = i + 1 if i + 1 < n else 0
                self.published += batch
                await sleep(0)
        except Exception as exc:
            self.error = repr(exc)


async def declare_exchange(conn: Conn, name: str, kind: str, ch: int = 1) -> None:
    conn.send(cmd.Exchange.Declare(exchange=name, exchange_type=kind, durable=False,
                                   auto_delete=False), ch)
    await conn.expect(cmd.Exchange.DeclareOk)


async def declare_bound_queues(conn: Conn, exchange: str, qnames: list[str],
                               bindings: list[tuple[int, str]], ch: int = 1) -> float:
    """Declare non-durable ``qnames`` and bind them; ``bindings`` = (queue index,
    routing key).  Declares and binds are pipelined; returns the seconds it took."""
    t0 = time.perf_counter()
    for q in qnames:
        conn.send(cmd.Queue.Declare(queue=q, durable=False, exclusive=False,
                                    auto_delete=False), ch)
    for _ in qnames:
        await conn.expect(cmd.Queue.DeclareOk)
    for qi, key in bindings:
        conn.send(cmd.Queue.Bind(queue=qnames[qi], exchange=exchange, routing_key=key), ch)
    for _ in bindings:
        await conn.expect(cmd.Queue.BindOk, timeout=60)
    return time.perf_counter() - t0


async def multi_consumers(cfg: Config, qnames: list[str]) -> tuple[list[Conn], list[Consumer]]:
    """One consumer per queue.  ``cfg.consumer_conns`` connections (0 = one per
    consumer); consumer i uses connection i % n, channel i // n + 1.  With shared
    connections only no-ack works (one fast parser per connection counts every
    channel's deliveries; acks would go to the wrong channel)."""
    n = cfg.consumer_conns or len(qnames)
    n = min(n, len(qnames))
    if n < len(qnames) and not cfg.no_ack:
        raise ValueError("--consumer-conns < --queues needs --no-ack")
    conns = [await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost,
                           f"bench-consumer-{i}") for i in range(n)]
    consumers = []
    for i, q in enumerate(qnames):
        conn, ch = conns[i % n], i // n + 1
        await open_channel(conn, ch)
        if cfg.prefetch:
            conn.send(cmd.Basic.Qos(prefetch_count=cfg.prefetch), ch)
            await conn.expect(cmd.Basic.QosOk)
        c = Consumer(conn, ch, cfg.no_ack, cfg.multi_ack_every)
        if ch == 1:
            c.install()  # this connection's parser (counts all its channels)
            consumers.append(c)
        conn.send(cmd.Basic.Consume(queue=q, consumer_tag="bench", no_ack=cfg.no_ack), ch)
        await conn.expect(cmd.Basic.ConsumeOk)
    return conns, consumers


async def _cleanup_multi(conn: Conn, exchange: str, qnames: list[str], res: dict) -> None:
    try:
        await open_channel(conn, 2)
        for q in qnames:
            conn.send(cmd.Queue.Delete(queue=q), 2)
        for _ in qnames:
            await conn.expect(cmd.Queue.DeleteOk, timeout=30)
        conn.send(cmd.Exchange.Delete(exchange=exchange), 2)
        await conn.expect(cmd.Exchange.DeleteOk, timeout=30)
    except Exception as exc:
        res["cleanup_error"] = repr(exc)


def _backlog_gate(cfg: Config, pub: Publisher, consumers: list[Consumer], fanout: int):
    """--max-backlog for multi-queue scenarios: published*fanout - delivered."""
    total = CountSum(consumers)

    async def gate():
        while pub.published * fanout - total.count > cfg.max_backlog:
            await asyncio.sleep(0.001)
    return gate


async def _run_multi(cfg: Config, kind: str, bindings: list[tuple[int, str]],
                     payloads: list[bytes] | None, one_msg: bytes | None,
                     exchange: str, qnames: list[str], res: dict) -> dict:
    setup = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost, "bench-setup")
    conns: list[Conn] = []
    pconn = None
    try:
        await open_channel(setup, 1)
        await declare_exchange(setup, exchange, kind)
        res["setup_s"] = round(await declare_bound_queues(setup, exchange, qnames, bindings), 3)
        conns, consumers = await multi_consumers(cfg, qnames)
        pconn = await connect(cfg.host, cfg.port, cfg.user, cfg.password, cfg.vhost,
                              "bench-producer")
        await open_channel(pconn, 1)
        pub = (PoolPublisher(pconn, payloads, cfg.batch) if payloads is not None
               else Publisher(pconn, one_msg, cfg.batch))
        if cfg.max_backlog:
            pub.gate = _backlog_gate(cfg, pub, consumers, len(qnames) if kind == "fanout"
                                     else res.get("topic_expected_deliveries_per_msg", 1))
        task = asyncio.create_task(pub.run())
        try:
            m = await measure(cfg, CountSum(consumers), [pub])
        finally:
            pub.stopped = True
            await asyncio.wait([task], timeout=2)
        res.update(m)
        if m.get("broker_cpu_s") is not None and m["published"]:
            res["broker_cpu_us_per_published"] = round(1e6 * m["broker_cpu_s"] / m["published"], 3)
        res["deliveries_per_published"] = (round(m["consumed"] / m["published"], 3)
                                           if m["published"] else None)
        res["per_consumer_count"] = [c.count for c in consumers]
        # deliveries still owed at the end: published x deliveries-per-message - delivered
        per = len(qnames) if kind == "fanout" else res.get("topic_expected_deliveries_per_msg", 1)
        res["backlog_at_end"] = round(pub.published * per - sum(c.count for c in consumers))
        res["consumer_connections"] = len(conns)
        res.update({"server_product": as_text(setup.server_properties.get("product")),
                    "server_version": as_text(setup.server_properties.get("version"))})
        await pconn.close()
        pconn = None
        for c in conns:
            await c.close()
        conns = []
        await _cleanup_multi(setup, exchange, qnames, res)
        return res
    finally:
        if pconn is not None:
            await pconn.close()
        for c in conns:
            await c.close()
        await setup.close()


async def scenario_fanout(cfg: Config) -> dict:
    """1 producer -> fanout exchange -> ``cfg.queues`` (10) non-durable queues ->
    one consumer each (own connection by default, ``--consumer-conns`` to share),
    ``cfg.size``-byte transient messages, no-ack by default.  Headline:
    deliveries/s summed over the consumers; also published msg/s and broker CPU
    per delivery and per published message."""
    uid = uuid.uuid4().hex[:8]
    exchange = f"leveret-bench-fanout-{uid}"
    qnames = [f"leveret-bench-fanout-{uid}-{i}" for i in range(cfg.queues)]
    body = (b"leveret-bench" * (cfg.size // 13 + 1))[: cfg.size]
    res: dict = {"exchange": exchange, "queues": cfg.queues, "message_size": cfg.size}
    return await _run_multi(cfg, "fanout", [(i, "") for i in range(cfg.queues)], None,
                            encode_publish(exchange, "", body), exchange, qnames, res)


# topic: routing keys have TOPIC_LEVELS words, word j of level l is "<letter l><j>"
TOPIC_LEVELS = 5
TOPIC_VOCAB = 10


def topic_workload(n_bindings: int, n_queues: int, n_keys: int, seed: int):
    """Deterministic (seeded) wildcard patterns and routing keys.

    Keys: 5 words, 10 choices per level (10^5 keys), drawn uniformly.  Patterns
    (each a random key with some words replaced) and the share of keys each
    matches: 40 % one ``*`` (1e-4), 30 % two ``*`` (1e-3), 15 % ``w.w.w.#``
    (1e-3), 10 % ``w.*.w.#`` (1e-2), 5 % ``w.#.w`` (1e-2), i.e. about two
    matching bindings per key on average.  Binding i goes to queue i % n_queues.
    Returns (bindings [(queue, pattern)], keys, stats)."""
    import random
    import re

    rng = random.Random(seed)
    words = [[f"{chr(97 + lv)}{j}" for j in range(TOPIC_VOCAB)] for lv in range(TOPIC_LEVELS)]

    def rand_key():
        return [rng.choice(words[lv]) for lv in range(TOPIC_LEVELS)]

    patterns: list[str] = []
    seen = set()
    while len(patterns) < n_bindings:
        k, r = rand_key(), rng.random()
        if r < 0.40:
            k[rng.randrange(TOPIC_LEVELS)] = "*"
        elif r < 0.70:
            for i in rng.sample(range(TOPIC_LEVELS), 2):
                k[i] = "*"
        elif r < 0.85:
            k = [*k[:3], "#"]
        elif r < 0.95:
            k = [k[0], "*", k[2], "#"]
        else:
            k = [k[0], "#", k[-1]]
        p = ".".join(k)
        if p not in seen:
            seen.add(p)
            patterns.append(p)
    bindings = [(i % n_queues, p) for i, p in enumerate(patterns)]
    keys = [".".join(rand_key()) for _ in range(n_keys)]

    def rx(p):
        parts = []
        for w in p.split("."):
            parts.append(r"(?:[^.]+\.)*" if w == "#" else
                         r"[^.]+\." if w == "*" else re.escape(w) + r"\.")
        return "".join(parts)

    per_queue = [re.compile("|".join(f"(?:{rx(p)})" for qi, p in bindings if qi == q))
                 for q in range(n_queues)]
    queues_hit = [sum(1 for r in per_queue if r.fullmatch(k + ".")) for k in keys]
    single = [re.compile(rx(p)) for _q, p in bindings]
    sample = keys[:500]
    bind_hits = [sum(1 for r in single if r.fullmatch(k + ".")) for k in sample]
    stats = {"topic_keys_in_pool": n_keys, "topic_distinct_keys": len(set(keys)),
             "topic_key_space": TOPIC_VOCAB ** TOPIC_LEVELS,
             "topic_expected_deliveries_per_msg": round(sum(queues_hit) / n_keys, 4),
             "topic_share_routed": round(sum(1 for x in queues_hit if x) / n_keys, 4),
             "topic_bindings_matched_per_msg": round(sum(bind_hits) / len(sample), 3),
             "topic_example_patterns": patterns[:6], "topic_example_keys": keys[:3]}
    return bindings, keys, stats


async def scenario_topic(cfg: Config) -> dict:
    """1 producer -> topic exchange with ``cfg.bindings`` (1,000) wildcard bindings
    over ``cfg.queues`` (10) queues -> one consumer per queue (no-ack).  The
    publisher cycles through ``cfg.key_pool`` pre-encoded messages whose routing
    keys come from a seeded RNG (``--seed``), so every broker sees the same key
    sequence.  Headline: published msg/s; also deliveries/s, broker CPU per
    published message, and deliveries per published message next to the value
    expected from the patterns (a routing-correctness check)."""
    uid = uuid.uuid4().hex[:8]
    exchange = f"leveret-bench-topic-{uid}"
    qnames = [f"leveret-bench-topic-{uid}-{i}" for i in range(cfg.queues)]
    bindings, keys, stats = topic_workload(cfg.bindings, cfg.queues, cfg.key_pool, cfg.seed)
    body = (b"leveret-bench" * (cfg.size // 13 + 1))[: cfg.size]
    msgs = [encode_publish(exchange, k, body) for k in keys]
    b = max(1, cfg.batch)
    payloads = [b"".join(msgs[i:i + b]) for i in range(0, len(msgs) - b + 1, b)]
    res: dict = {"exchange": exchange, "queues": cfg.queues, "bindings": len(bindings),
                 "message_size": cfg.size, "seed": cfg.seed, **stats}
    return await _run_multi(cfg, "topic", bindings, payloads, None, exchange, qnames, res)
