"""A cluster node that cannot join stops with one clear line (exit status 1)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import harness


def _serve(data_dir: Path, etcd: str, cluster: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "leveret", "serve", "--node-name", "n1", "--etcd", etcd,
         "--cluster-name", cluster, "--host", "127.0.0.1", "--port", str(harness.free_port()),
         "--replication-port", str(harness.free_port()), "--management-port", "0",
         "--prometheus-port", "0", "--management-tls-port", "0", "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=120)


def test_unreachable_etcd_is_one_line(tmp_path: Path) -> None:
    done = _serve(tmp_path / "d", f"http://127.0.0.1:{harness.free_port()}", "blue")
    assert done.returncode == 1
    assert done.stderr.count("leveret: error:") == 1
    assert "leveret: error: cannot join cluster 'blue': cannot reach etcd" in done.stderr


def test_data_dir_of_another_cluster_is_refused(etcd: harness.Etcd, tmp_path: Path) -> None:
    data_dir = tmp_path / "d"
    data_dir.mkdir()
    (data_dir / "cluster-name").write_text("green\n")
    done = _serve(data_dir, etcd.url, "blue")
    assert done.returncode == 1
    assert (f"leveret: error: data directory {data_dir} belongs to cluster 'green', "
            "not 'blue'") in done.stderr
