"""``leveret ctl cluster_status``: the cluster as etcd records it, read without any node.

rabbitmqctl's sections where they apply (cluster name, disk nodes, running nodes), plus
what a leader-and-followers cluster adds: the leader, its epoch and the in-sync set.
Read from etcd, so it answers even when the leader is down or being elected.
"""

from __future__ import annotations

from typing import Any

from leveret.cluster.coordinator import CoordinatorError, EtcdCoordinator

__all__ = ["CoordinatorError", "cluster_status", "format_status"]


async def cluster_status(endpoints: tuple[str, ...], cluster: str) -> dict[str, Any]:
    """rabbitmqctl's ``--formatter json`` keys that apply, and the leader's; raises
    CoordinatorError when etcd cannot be reached."""
    coordinator = EtcdCoordinator(endpoints, cluster, 2)
    await coordinator.connect()
    try:
        members = await coordinator.members()
        leader = await coordinator.leader()
        in_sync = await coordinator.in_sync()
    finally:
        await coordinator.close()
    return {
        "cluster_name": cluster,
        "disk_nodes": sorted(members),
        "running_nodes": sorted(n for n, m in members.items() if m.get("running") == "true"),
        "leader": leader.node if leader is not None else None,
        "epoch": leader.epoch if leader is not None else None,
        "in_sync": sorted(in_sync),
        "nodes": [{"name": n, **m} for n, m in members.items()],
    }


def format_status(status: dict[str, Any]) -> str:
    """rabbitmqctl's text layout: a heading per section, one item per line."""
    lines = ["Basics", "", f"Cluster name: {status['cluster_name']}", "", "Disk Nodes", ""]
    lines += status["disk_nodes"] or ["(none)"]
    lines += ["", "Running Nodes", ""]
    lines += status["running_nodes"] or ["(none)"]
    lines += ["", "Leader", ""]
    leader = status["leader"]
    lines.append(f"{leader} (epoch {status['epoch']})" if leader else "(none: an election is due)")
    lines += ["", "In-sync Replicas", ""]
    lines += status["in_sync"] or ["(none)"]
    return "\n".join(lines) + "\n"
