"""A private etcd per test module, on free ports (the ``etcd`` binary on PATH).

Without etcd the cluster tests skip, except under CI (``CI`` set), where they fail:
``.ci/run`` installs Debian's ``etcd-server`` when ``etcd`` is missing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import harness


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[harness.Etcd]:
    if harness.etcd_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("etcd is not installed (apt-get install etcd-server)")
        pytest.skip("etcd is not installed (apt-get install etcd-server)")
    server = harness.Etcd(tmp_path_factory.mktemp("etcd")).start()
    yield server
    server.stop()


@pytest.fixture
def cluster(etcd: harness.Etcd, tmp_path: Path, request: pytest.FixtureRequest
            ) -> Iterator[harness.Cluster]:
    # One key prefix per test: each starts from an empty cluster on the module's etcd.
    group = harness.Cluster(tmp_path, etcd, name=f"t-{request.node.name}"[:60])
    yield group
    group.stop()
