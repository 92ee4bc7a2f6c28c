"""Clustering: three (or more) Leveret nodes on etcd, one leader, synchronised followers.

Theory of operation
-------------------
A concept of its own, above the node: it decides *which* broker process serves (the
leader) and keeps the others' stores identical, batch by batch, without the broker model
knowing. The group-commit batch is the replication unit; etcd holds the leader's lease,
the epoch and the in-sync set, and sees no message. Modules:

* ``coordinator.py``: the ``Coordinator`` seam and its etcd (v3 JSON gateway) client;
* ``wire.py``: the replication link's frames and authentication; ``lineage.py``: which
  epoch wrote which batch, to tell a follower that shares the leader's history from one
  that needs a snapshot;
* ``leader.py``: ships batches, and confirms only what every in-sync follower holds;
* ``follower.py``: applies them through the store's one write path;
* ``proxy.py``: a follower relays AMQP clients to the leader;
* ``follower_metrics.py``: a follower's own Prometheus endpoint;
* ``crash_hook.py``: a test hook, a leader dying between its local commit and shipping;
* ``node.py``: a node's life (follow, campaign, lead), the entry point ``cli.py`` uses
  instead of ``node.process.run`` when ``--etcd`` is set, so a single node pays nothing.
"""
