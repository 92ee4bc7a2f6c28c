"""leveret.config: precedence, conversion, validation and its messages."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from leveret.config import Config, ConfigError, default_data_dir, load_config

# A minimal environment: no LEVERET_* variables, a fixed home for data_dir.
BASE_ENV = {"HOME": "/home/rabbit"}


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "leveret.toml"
    path.write_text(text)
    return path


def error_of(argv: dict[str, Any], env: dict[str, str], config_file: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(argv, {**BASE_ENV, **env}, config_file)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- defaults -----------------------------------------------------------------


def test_defaults() -> None:
    config = load_config({}, BASE_ENV, None)
    assert config == Config(data_dir=Path("/home/rabbit/.local/share/leveret"))
    assert config.host == ()
    assert config.port == 5672
    assert config.management_port == 15672
    assert config.frame_max == 131072
    assert config.channel_max == 2047
    assert config.heartbeat == 60
    assert config.max_message_size == 128 * 1024 * 1024
    assert (config.default_user, config.default_pass, config.default_vhost) == ("guest",) * 2 + (
        "/",
    )
    assert config.loopback_users == ("guest",)
    assert config.disk_free_limit == 50_000_000
    assert config.log_level == "info"
    assert config.handshake_timeout == 10.0


def test_config_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Config().port = 1


def test_default_data_dir_follows_xdg() -> None:
    assert default_data_dir({"XDG_DATA_HOME": "/xdg", "HOME": "/h"}) == Path("/xdg/leveret")
    # The XDG spec says to ignore an empty or relative XDG_DATA_HOME.
    assert default_data_dir({"XDG_DATA_HOME": "rel", "HOME": "/h"}) == Path(
        "/h/.local/share/leveret"
    )
    assert default_data_dir({"XDG_DATA_HOME": "", "HOME": "/h"}) == Path("/h/.local/share/leveret")


def test_data_dir_default_uses_injected_env() -> None:
    config = load_config({}, {"XDG_DATA_HOME": "/srv/data"}, None)
    assert config.data_dir == Path("/srv/data/leveret")


# --- precedence: flag > env > file > default ------------------------------------


def test_precedence_flag_env_file_default(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "port = 1111\nmanagement_port = 2222\nheartbeat = 33\n")
    env = {"LEVERET_PORT": "3333", "LEVERET_MANAGEMENT_PORT": "4444"}
    config = load_config({"port": "5555"}, {**BASE_ENV, **env}, toml)
    assert config.port == 5555  # flag beats env and file
    assert config.management_port == 4444  # env beats file
    assert config.heartbeat == 33  # file beats default
    assert config.channel_max == 2047  # default


def test_none_flag_means_not_given() -> None:
    config = load_config({"port": None, "host": None}, {**BASE_ENV, "LEVERET_PORT": "5673"}, None)
    assert config.port == 5673
    assert config.host == ()


def test_config_file_from_env(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "port = 7000\n")
    config = load_config({}, {**BASE_ENV, "LEVERET_CONFIG": str(toml)}, None)
    assert config.port == 7000


def test_config_flag_beats_config_env(tmp_path: Path) -> None:
    from_flag = write_toml(tmp_path, "port = 7001\n")
    config = load_config({}, {**BASE_ENV, "LEVERET_CONFIG": "/nonexistent.toml"}, from_flag)
    assert config.port == 7001


def test_every_field_has_an_env_var() -> None:
    env = {
        "LEVERET_HOST": "127.0.0.1, ::1",
        "LEVERET_PORT": "0",
        "LEVERET_DATA_DIR": "/var/lib/leveret",
        "LEVERET_MANAGEMENT_PORT": "0",
        "LEVERET_FRAME_MAX": "4096",
        "LEVERET_CHANNEL_MAX": "10",
        "LEVERET_HEARTBEAT": "0",
        "LEVERET_MAX_MESSAGE_SIZE": "1000",
        "LEVERET_DEFAULT_USER": "admin",
        "LEVERET_DEFAULT_PASS": "",
        "LEVERET_DEFAULT_VHOST": "prod",
        "LEVERET_LOOPBACK_USERS": "",
        "LEVERET_DISK_FREE_LIMIT": "0",
        "LEVERET_LOG_LEVEL": "DEBUG",
        "LEVERET_HANDSHAKE_TIMEOUT": "2.5",
    }
    config = load_config({}, env, None)
    assert config == Config(
        host=("127.0.0.1", "::1"),
        port=0,
        data_dir=Path("/var/lib/leveret"),
        management_port=0,
        frame_max=4096,
        channel_max=10,
        heartbeat=0,
        max_message_size=1000,
        default_user="admin",
        default_pass="",
        default_vhost="prod",
        loopback_users=(),
        disk_free_limit=0,
        log_level="debug",
        handshake_timeout=2.5,
    )


def test_toml_file_all_kinds(tmp_path: Path) -> None:
    toml = write_toml(
        tmp_path,
        'host = ["0.0.0.0"]\nloopback_users = []\nhandshake_timeout = 3\n'
        'data_dir = "store"\nlog_level = "warning"\n',
    )
    config = load_config({}, BASE_ENV, toml)
    assert config.host == ("0.0.0.0",)
    assert config.loopback_users == ()
    assert config.handshake_timeout == 3.0
    assert config.data_dir == tmp_path / "store"  # relative to the file, not the cwd
    assert config.log_level == "warning"


def test_repeated_host_flag_and_commas() -> None:
    config = load_config({"host": ["127.0.0.1", "::1,10.0.0.1", "::1"]}, BASE_ENV, None)
    assert config.host == ("127.0.0.1", "::1", "10.0.0.1")  # duplicates dropped


def test_flags_may_be_typed_values(tmp_path: Path) -> None:
    config = load_config({"port": 5673, "data_dir": tmp_path}, BASE_ENV, None)
    assert (config.port, config.data_dir) == (5673, tmp_path)


# --- errors: one line naming key and source -------------------------------------


def test_bad_env_port_message() -> None:
    assert error_of({}, {"LEVERET_PORT": "abc"}) == (
        "invalid port in environment variable LEVERET_PORT: expected an integer, got 'abc'"
    )


def test_bad_flag_port_message() -> None:
    assert error_of({"port": "70000"}, {}) == (
        "invalid port in command-line flag --port: "
        "must be between 0 and 65535 (0 = any free port), got 70000"
    )


@pytest.mark.parametrize("value", ["-1", "65536", "5672.0", "", " ", "0x10", "1e3"])
def test_bad_ports_rejected(value: str) -> None:
    message = error_of({}, {"LEVERET_PORT": value})
    assert message.startswith("invalid port in environment variable LEVERET_PORT: ")


@pytest.mark.parametrize("value", ["0", "1", "5672", "65535", " 5672 "])
def test_good_ports_accepted(value: str) -> None:
    assert load_config({}, {**BASE_ENV, "LEVERET_PORT": value}, None).port == int(value)


def test_bad_toml_type_message(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, 'port = "5672"\n')
    assert error_of({}, {}, toml) == (
        f"invalid port in config file {toml}: expected an integer, got a string ('5672')"
    )


def test_toml_bool_is_not_an_integer(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "heartbeat = true\n")
    assert "expected an integer, got a boolean (True)" in error_of({}, {}, toml)


def test_unknown_toml_key(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "port = 5672\nprot = 5673\n")
    assert error_of({}, {}, toml) == (
        f"unknown key 'prot' in config file {toml}; did you mean 'port'?"
    )


def test_toml_table_is_unknown_key(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "[server]\nport = 1\n")
    assert error_of({}, {}, toml).startswith(f"unknown key 'server' in config file {toml}")


def test_invalid_toml_syntax(tmp_path: Path) -> None:
    toml = write_toml(tmp_path, "port = \n")
    message = error_of({}, {}, toml)
    assert message.startswith(f"config file {toml} is not valid TOML: ")
    assert "line 1" in message


def test_missing_config_file_names_its_source(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    assert error_of({}, {"LEVERET_CONFIG": str(missing)}) == (
        f"cannot read config file {missing} (from environment variable LEVERET_CONFIG): "
        "No such file or directory"
    )


def test_bad_file_value_reported_even_when_overridden(tmp_path: Path) -> None:
    # A broken file is an error now, not when someone later drops the override.
    toml = write_toml(tmp_path, "port = 99999\n")
    assert error_of({"port": "5672"}, {}, toml).startswith(f"invalid port in config file {toml}")


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("frame_max", "4095", "must be between 4096 and 4294967295, got 4095"),
        ("channel_max", "0", "must be between 1 and 65535, got 0"),
        ("heartbeat", "70000", "must be between 0 and 65535 (0 = disabled), got 70000"),
        ("max_message_size", "536870913", "must be between 1 and 536870912, got 536870913"),
        ("handshake_timeout", "soon", "expected a number, got 'soon'"),
        ("handshake_timeout", "0", "must be greater than 0, got 0.0"),
        ("handshake_timeout", "nan", "expected a finite number, got 'nan'"),
        ("log_level", "loud", "must be one of debug, info, warning, error, critical, got 'loud'"),
        ("default_vhost", "", "must not be empty"),
        ("data_dir", "", "expected a path, got an empty string"),
        ("host", "a b", "each host must be non-empty without spaces, got 'a b'"),
        ("disk_free_limit", "-5", "must be between 0 and 9223372036854775807, got -5"),
    ],
)
def test_field_validation_messages(name: str, value: str, problem: str) -> None:
    var = f"LEVERET_{name.upper()}"
    expected = f"invalid {name} in environment variable {var}: {problem}"
    assert error_of({}, {var: value}) == expected


def test_value_with_newline_stays_one_line() -> None:
    assert error_of({}, {"LEVERET_PORT": "1\n2"}).endswith("got '1\\n2'")


def test_port_clash_names_both_sources() -> None:
    message = error_of({"management_port": "5672"}, {})
    assert message == (
        "invalid ports: port and management_port are both 5672 "
        "(port from default, management_port from command-line flag --management-port)"
    )


def test_both_ports_zero_is_fine() -> None:
    config = load_config({"port": "0", "management_port": "0"}, BASE_ENV, None)
    assert (config.port, config.management_port) == (0, 0)


def test_unknown_argv_option_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="prot"):
        load_config({"prot": "1"}, BASE_ENV, None)


def test_unrelated_leveret_env_vars_are_ignored() -> None:
    # Other tools (test harnesses, scripts) may use the prefix too.
    assert load_config({}, {**BASE_ENV, "LEVERET_TEST_URL": "x"}, None).port == 5672


def test_hand_built_invalid_config_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"^invalid frame_max in Config\(\): "):
        Config(frame_max=10)
