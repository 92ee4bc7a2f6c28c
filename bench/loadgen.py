#!/usr/bin/env python3
"""Cheap AMQP 0-9-1 load generator for the Leveret/RabbitMQ comparison benchmarks: the
command line and the scenario table.

Run standalone (prints one JSON object on the last stdout line)::

    python bench/loadgen.py --port 5672 --scenario transient --duration 10

``bench/run.py`` drives it as a subprocess, one process per round. The parts, one module
each beside this one:

* ``loadgen_client``: the raw asyncio AMQP connection (uvloop when available; pamqp for the
  handshake and rare frames only);
* ``loadgen_peers``: the hand-rolled hot paths, publishers and consumers;
* ``loadgen_proc``: CPU, RSS, disk and file counts read from ``/proc``;
* ``loadgen_measure``: the run's ``Config`` and the steady-state ``measure``;
* the scenarios: ``loadgen_throughput`` (transient, consumers), ``loadgen_durable``
  (confirmed, backlog), ``loadgen_routing`` (fanout, topic), ``loadgen_latency``,
  ``loadgen_conns``.

Adding a scenario: write ``async def scenario_<name>(cfg) -> dict`` in the module of its
kind and register it in ``SCENARIOS``. The returned dict should at least contain the keys
produced by ``measure`` (``consumed_per_s`` is the headline figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import asdict

from loadgen_client import connect, delete_queue
from loadgen_conns import scenario_conns
from loadgen_durable import scenario_backlog, scenario_confirmed
from loadgen_latency import scenario_latency
from loadgen_measure import Config
from loadgen_proc import raise_nofile
from loadgen_routing import scenario_fanout, scenario_topic
from loadgen_throughput import scenario_consumers, scenario_transient

# name -> coroutine function(cfg) -> result dict.
SCENARIOS = {
    "transient": scenario_transient,
    "confirmed": scenario_confirmed,
    "backlog": scenario_backlog,
    "fanout": scenario_fanout,
    "topic": scenario_topic,
    "latency": scenario_latency,
    "conns": scenario_conns,
    "consumers": scenario_consumers,
}

# Per-scenario defaults for options left unset on the command line (None).
SCENARIO_DEFAULTS = {
    "transient": {"size": 256, "prefetch": 0, "multi_ack_every": 0, "max_backlog": 0},
    "confirmed": {"size": 256, "prefetch": 200, "multi_ack_every": 0, "max_backlog": 0},
    "backlog": {"size": 1024, "prefetch": 1000, "multi_ack_every": 100, "max_backlog": 0},
    # fanout/topic: the publisher pauses while more than max_backlog deliveries are
    # owed (published x deliveries per message - delivered), so that short runs
    # measure the steady state and not the drain of a warmup burst
    "fanout": {"size": 256, "prefetch": 0, "multi_ack_every": 0, "no_ack": True,
               "max_backlog": 20000},
    "topic": {"size": 256, "prefetch": 0, "multi_ack_every": 0, "no_ack": True,
              "max_backlog": 10000},
    "latency": {"size": 256, "prefetch": 0, "multi_ack_every": 0, "max_backlog": 0},
    "conns": {"size": 256, "prefetch": 0, "multi_ack_every": 0, "max_backlog": 0},
    "consumers": {"size": 256, "prefetch": 10, "multi_ack_every": 0, "max_backlog": 0},
}


def apply_scenario_defaults(args) -> None:
    """Fill options the user left as None with the scenario's defaults."""
    for k, v in SCENARIO_DEFAULTS.get(args.scenario, {}).items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)
    if getattr(args, "no_ack", None) is None:
        args.no_ack = False


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Config()
    p.add_argument("--host", default=d.host)
    p.add_argument("--port", type=int, default=d.port)
    p.add_argument("--user", default=d.user)
    p.add_argument("--password", default=d.password)
    p.add_argument("--vhost", default=d.vhost)
    p.add_argument("--scenario", default=d.scenario, choices=sorted(SCENARIOS))
    p.add_argument("--duration", type=float, default=d.duration, help="measured seconds")
    p.add_argument("--warmup", type=float, default=d.warmup, help="unmeasured seconds first")
    p.add_argument("--size", type=int, default=None,
                   help="message body bytes (default: 256; backlog: 1024)")
    p.add_argument("--batch", type=int, default=d.batch, help="publishes per socket write")
    p.add_argument("--prefetch", type=int, default=None,
                   help="basic.qos; 0 = unlimited (default: 0; confirmed: 200; backlog: 1000)")
    p.add_argument("--multi-ack-every", type=int, default=None,
                   help="ack with multiple=true every N deliveries; 0 = one ack per message "
                        "(default: 0; backlog: 100)")
    p.add_argument("--window", type=int, default=d.window,
                   help="confirm scenarios: max unconfirmed publishes in flight")
    p.add_argument("--messages", type=int, default=d.messages,
                   help="backlog: messages to publish, then drain")
    p.add_argument("--data-dir", default=None,
                   help="backlog: broker data dir whose size is reported (if readable)")
    p.add_argument("--stall-timeout", type=float, default=d.stall_timeout,
                   help="fail when no confirm/delivery arrives for this many seconds")
    p.add_argument("--delete-queue", default=None, metavar="NAME",
                   help="only delete queue NAME and exit (cleanup after an aborted run)")
    p.add_argument("--no-ack", action="store_true", default=None,
                   help="consume with no-ack (auto ack); default for fanout and topic")
    p.add_argument("--ack", dest="no_ack", action="store_false",
                   help="manual ack (the default except for fanout and topic)")
    p.add_argument("--queues", type=int, default=d.queues,
                   help="fanout/topic: queues, one consumer each")
    p.add_argument("--consumer-conns", type=int, default=d.consumer_conns,
                   help="fanout/topic: connections shared by the consumers (0 = one each)")
    p.add_argument("--bindings", type=int, default=d.bindings,
                   help="topic: wildcard bindings over the queues")
    p.add_argument("--seed", type=int, default=d.seed, help="topic: RNG seed")
    p.add_argument("--key-pool", type=int, default=d.key_pool,
                   help="topic: pre-encoded messages (random routing keys) cycled")
    p.add_argument("--rate", type=float, default=d.rate, help="latency: publishes per second")
    p.add_argument("--connections", type=int, default=d.connections,
                   help="conns: idle connections to open")
    p.add_argument("--connect-concurrency", type=int, default=d.connect_concurrency,
                   help="conns: handshakes in flight at once")
    p.add_argument("--consumers", type=int, default=d.consumers,
                   help="consumers: consumers of the one queue")
    p.add_argument("--consumer-channels", choices=["one", "many"], default=d.consumer_channels,
                   help="consumers: all on one channel, or one channel each")
    p.add_argument("--max-backlog", type=int, default=None,
                   help="pause publishing while published-consumed exceeds N; 0 = off "
                        "(default 0; fanout 20,000 and topic 10,000 deliveries owed)")
    p.add_argument("--queue-args", default="",
                   help="backlog, confirmed: the queue's arguments as JSON, e.g. '{\"x-message-ttl\": 86400000}'")
    p.add_argument("--priorities", type=int, default=d.priorities,
                   help="confirmed/backlog: publishes cycle through priorities 0..N-1 (0: none)")
    p.add_argument("--broker-pid", type=int, default=None,
                   help="broker pid for CPU/RSS accounting (its descendants are included)")
    p.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    apply_scenario_defaults(args)
    if args.delete_queue:
        async def _delete():
            conn = await connect(args.host, args.port, args.user, args.password, args.vhost,
                                 "bench-cleanup")
            try:
                return await delete_queue(conn, args.delete_queue, 1)
            finally:
                await conn.close()
        try:
            out = {"ok": True, "queue_delete": asyncio.run(_delete())}
        except Exception as exc:
            out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out))
        return 0 if out["ok"] else 1
    cfg = Config(**{k: v for k, v in vars(args).items() if k in Config.__dataclass_fields__})
    raise_nofile()  # conns needs > 1,024 fds; harmless elsewhere
    if args.loop == "uvloop":
        try:
            import uvloop
            uvloop.install()
        except ImportError:
            pass
    try:
        res = asyncio.run(SCENARIOS[cfg.scenario](cfg))
        res["ok"] = True
    except Exception as exc:
        res = {**getattr(exc, "partial_result", {}), "ok": False,
               "error": f"{type(exc).__name__}: {exc}"}
    res["config"] = asdict(cfg)
    print(json.dumps(res))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
