"""Clustering settings read as every other setting: flags > LEVERET_* > TOML > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from leveret.config import Config, ConfigError, load_config


def test_defaults_leave_clustering_off() -> None:
    config = Config()
    assert config.etcd == ()
    assert (config.cluster_name, config.min_in_sync, config.lease_ttl) == ("leveret", 2, 5)


def test_each_source_sets_the_cluster_settings(tmp_path: Path) -> None:
    toml = tmp_path / "leveret.toml"
    toml.write_text('etcd = ["http://a:2379"]\ncluster_name = "blue"\nlease_ttl = 4\n')
    config = load_config(
        {"node_name": "n1", "replication_port": "5689", "etcd": None},
        {"LEVERET_ETCD": "http://b:2379,http://c:2379", "LEVERET_MIN_IN_SYNC": "3"}, toml)
    assert config.etcd == ("http://b:2379", "http://c:2379")  # env over the file
    assert (config.node_name, config.replication_port) == ("n1", 5689)
    assert (config.cluster_name, config.lease_ttl, config.min_in_sync) == ("blue", 4, 3)
    assert config.replication_advertised_port == 0  # advertise replication_port itself
    relayed = load_config({"replication_advertised_port": "6689"}, {}, None)
    assert relayed.replication_advertised_port == 6689


@pytest.mark.parametrize(("key", "value", "problem"), [
    ("lease_ttl", "1", "must be between 2 and 3600"),
    ("min_in_sync", "0", "must be between 1 and 64"),
    ("node_name", "a b", "must be non-empty without spaces"),
    ("replication_advertised_port", "70000", "must be between 0 and 65535"),
])
def test_bad_cluster_settings_are_one_line_errors(key: str, value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"invalid {key} in command-line flag.*{problem}"):
        load_config({key: value}, {}, None)
