"""leveret.cli: exit codes, one-line errors, logging format, data directory checks.

The subprocess tests run ``python -m leveret`` as a user would; the in-process
ones call ``main(argv, env, stderr)`` with an injected environment.
"""

from __future__ import annotations

import importlib
import io
import logging
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import leveret
from leveret.cli import DataDirError, configure_logging, main, prepare_data_dir
from leveret.config import Config


def _server_importable() -> bool:
    try:
        importlib.import_module("leveret.node.process")
    except ImportError:
        return False
    return True


needs_server = pytest.mark.skipif(
    not _server_importable(), reason="leveret.node.process is not written yet"
)


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    """main() configures the root logger; undo it so other tests' caplog still works."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    for handler in [h for h in root.handlers if h not in handlers]:
        root.removeHandler(handler)
    root.setLevel(level)


def run_leveret(
    *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LEVERET_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "leveret", *args],
        env=full_env,
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_error_line(stderr: str, *fragments: str) -> str:
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("leveret: error: ")]
    assert len(errors) == 1, stderr
    for fragment in fragments:
        assert fragment in errors[0]
    return errors[0]


# --- subprocess: what a user sees ---------------------------------------------


def test_version() -> None:
    result = run_leveret("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"leveret {leveret.__version__}"


def test_bad_env_port_is_config_error(tmp_path: Path) -> None:
    result = run_leveret("--data-dir", str(tmp_path), env={"LEVERET_PORT": "abc"})
    assert result.returncode == 2
    assert result.stderr == (
        "leveret: error: invalid port in environment variable LEVERET_PORT: "
        "expected an integer, got 'abc'\n"
    )


def test_serve_subcommand_bad_flag_is_config_error(tmp_path: Path) -> None:
    result = run_leveret("serve", "--data-dir", str(tmp_path), "--port", "99999")
    assert result.returncode == 2
    assert_one_error_line(result.stderr, "invalid port in command-line flag --port")
    assert len(result.stderr.splitlines()) == 1


def test_data_dir_is_a_file(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "store"
    not_a_dir.write_text("")
    result = run_leveret("--data-dir", str(not_a_dir), "--log-level", "error")
    assert result.returncode == 1
    assert (
        result.stderr
        == f"leveret: error: data directory {not_a_dir} exists and is not a directory\n"
    )


@needs_server
def test_port_taken_is_startup_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_leveret(
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--management-port",
            "0",
            "--data-dir",
            str(tmp_path),
        )
    assert result.returncode == 1
    assert_one_error_line(result.stderr, str(port))


# --- in process ---------------------------------------------------------------


def test_usage_error_returns_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--no-such-flag"], env={}) == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def test_unknown_command_returns_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bogus"], env={}) == 2
    assert "invalid choice: 'bogus'" in capsys.readouterr().err


def test_help_returns_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"], env={}) == 0
    assert "serve" in capsys.readouterr().out


def test_config_file_flag_error(tmp_path: Path) -> None:
    toml = tmp_path / "leveret.toml"
    toml.write_text("prot = 1\n")
    err = io.StringIO()
    assert main(["--config", str(toml)], env={"HOME": str(tmp_path)}, stderr=err) == 2
    assert err.getvalue() == (
        f"leveret: error: unknown key 'prot' in config file {toml}; did you mean 'port'?\n"
    )


def test_missing_server_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A subpackage missing from the installation (as a wheel without it once shipped).
    monkeypatch.setitem(sys.modules, "leveret.amqp.server", None)
    err = io.StringIO()
    code = main(["--data-dir", str(tmp_path / "d"), "--log-level", "error"], env={}, stderr=err)
    assert code == 1
    assert_one_error_line(err.getvalue(), "leveret.amqp.server")
    assert (tmp_path / "d").is_dir()  # created before the server was looked for


def test_run_is_called_with_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_server(monkeypatch, behaviour=None)
    err = io.StringIO()
    argv = [
        "--host",
        "127.0.0.1",
        "--host",
        "::1",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path),
        "--log-level",
        "warning",
    ]
    assert main(argv, env={}, stderr=err) == 0
    (config,) = calls
    assert config.host == ("127.0.0.1", "::1")
    assert config.port == 0
    assert config.data_dir == tmp_path
    assert config.log_level == "warning"


def test_startup_error_returns_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_server(monkeypatch, behaviour="startup")
    err = io.StringIO()
    assert main(["--data-dir", str(tmp_path)], env={}, stderr=err) == 1
    line = assert_one_error_line(err.getvalue())
    assert line == "leveret: error: port 5672 is already in use"


def test_keyboard_interrupt_returns_0_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_server(monkeypatch, behaviour="interrupt")
    err = io.StringIO()
    assert main(["--data-dir", str(tmp_path), "--log-level", "error"], env={}, stderr=err) == 0
    assert err.getvalue() == ""


def _fake_server(monkeypatch: pytest.MonkeyPatch, behaviour: str | None) -> list[Config]:
    """Install a stand-in leveret.node.process honouring the run()/StartupError contract."""
    import types

    calls: list[Config] = []
    module = types.ModuleType("leveret.node.process")

    class StartupError(Exception):
        pass

    def run(config: Config, front_doors: object) -> None:
        calls.append(config)
        if behaviour == "startup":
            raise StartupError("port 5672 is already in use")
        if behaviour == "interrupt":
            raise KeyboardInterrupt

    module.StartupError = StartupError  # type: ignore[attr-defined]
    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "leveret.node.process", module)
    return calls


# --- data directory -------------------------------------------------------------


def test_prepare_data_dir_creates_missing(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    prepare_data_dir(target)
    assert target.is_dir()
    assert list(target.iterdir()) == []  # the write probe leaves nothing behind


def test_prepare_data_dir_parent_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(DataDirError, match=r"^cannot create data directory .*f/sub: "):
        prepare_data_dir(tmp_path / "f" / "sub")


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write to read-only directories"
)
def test_prepare_data_dir_not_writable(tmp_path: Path) -> None:
    target = tmp_path / "ro"
    target.mkdir()
    target.chmod(0o500)
    try:
        with pytest.raises(DataDirError, match=r"is not writable: Permission denied$"):
            prepare_data_dir(target)
    finally:
        target.chmod(0o700)


# --- logging --------------------------------------------------------------------


def test_log_format_and_level() -> None:
    stream = io.StringIO()
    handler = configure_logging("info", stream)
    try:
        logging.getLogger("leveret.test").debug("hidden")
        logging.getLogger("leveret.test").warning("disk %s", "low")
    finally:
        logging.getLogger().removeHandler(handler)
    line = stream.getvalue()
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[warning\] leveret\.test: disk low\n", line
    ), line


def test_configure_logging_replaces_its_own_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("info", first)
    handler = configure_logging("info", second)
    try:
        logging.getLogger("leveret.test").info("once")
    finally:
        logging.getLogger().removeHandler(handler)
    assert first.getvalue() == ""
    assert second.getvalue().count("once") == 1
