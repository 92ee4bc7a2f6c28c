"""What a user installs is what works: the built wheel, in a venv of its own, runs the broker.

The rest of the suite runs the editable tree, which hides packaging mistakes (a
subpackage left out of the wheel once broke every declare for ``pip install .``
users while all tests passed). So this test:

1. builds the wheel from a clean copy of the working tree (no stale ``build/``);
2. checks that every Python module of the tree is in the wheel, and nothing else;
3. installs it into a venv *without* system site-packages, dependencies coming
   from the package index as a user's would;
4. imports every module of the installed package (walked, not listed);
5. starts ``leveret serve`` from that venv and runs a pika session touching every
   AMQP class, fetches the web console and its assets over HTTP, then stops the
   broker with SIGTERM and expects exit status 0.

All of it twice: the wheel built with a C compiler (the hot-path modules compiled by
Cython) and with ``CC=false`` (compiling fails, setup.py falls back to pure Python); the
broker's start-up log and ``/api/overview`` must say which build runs. The compiled wheel
uses the ``CC`` of the environment: under ``.ci/test`` that is ccache, whose cache the
in-place build of the same sources has just filled, so the C files are not compiled twice
(pip still builds the wheel from the copy, Cython translates it, the modules are linked).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
import venv
import zipfile
from pathlib import Path

import pika
import pytest

from leveret.node import compiled

from .conftest import BrokerProcess

ROOT = Path(__file__).resolve().parent.parent
NOT_SHIPPED = {"tests", "bench", "examples", "docs", "build", "dist", "setup.py"}
# Optional extras a module may need; a module missing anything else is a packaging bug.
OPTIONAL = {"pyspark", "pyarrow", "pika"}  # pika: the labs (leveret lab run)

# Walks the installed files, not pkgutil: ``leveret.amqp`` is a namespace portion,
# which ``pkgutil.walk_packages`` does not descend into.
WALK = """
import importlib, importlib.util, pathlib, sys, leveret
root = pathlib.Path(leveret.__file__).parent
assert 'site-packages' in str(root), root
failed = []
for path in sorted(root.rglob('*.py')):
    parts = path.relative_to(root).with_suffix('').parts
    if parts[-1] == '__main__':  # runs the broker when imported
        continue
    name = '.'.join(('leveret',) + (parts[:-1] if parts[-1] == '__init__' else parts))
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if (exc.name or '').split('.')[0] not in {optional!r}:
            failed.append(f'{{name}}: {{exc!r}}')
    except Exception as exc:
        failed.append(f'{{name}}: {{exc!r}}')
    else:
        print(name)
spec = importlib.util.find_spec('amqp')
assert spec is None or 'leveret' not in (spec.origin or ''), spec
if failed:
    sys.exit('\\n'.join(failed))
"""


def _copy_tree(dest: Path) -> None:
    """The working tree as a fresh clone would have it, without build leftovers or venvs."""
    tracked = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    for rel in tracked:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _source_modules() -> set[str]:
    """Every module the wheel must carry, as ``leveret/...py`` paths."""
    found = set()
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in NOT_SHIPPED or any(p.startswith(".") for p in rel.parts):
            continue
        if "__pycache__" in rel.parts or rel.parts[0].endswith(".egg-info"):
            continue
        found.add("leveret/" + rel.as_posix())
    return found


# Building a wheel compiles the hot path (minutes on a busy 2-core machine) and installing
# it fetches the dependencies: a cap against a hang, not a budget.
pytestmark = pytest.mark.timeout(1200)

# How each wheel is built: with the machine's C compiler, and with one that always fails.
BUILDS = {"compiled": {}, "fallback": {"CC": "false"}}
EXPECTED = {"compiled": "compiled", "fallback": "pure"}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def build(request: pytest.FixtureRequest) -> str:
    # CC may be a command line ("ccache gcc", as .ci/test sets it): its first word runs.
    compiler = shlex.split(os.environ.get("CC", "cc"))
    if request.param == "compiled" and not (compiler and shutil.which(compiler[0])):
        pytest.skip("no C compiler: only the fallback build can be made here")
    return str(request.param)


@pytest.fixture(scope="module")
def wheel(build: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp(f"wheel-{build}")
    src = base / "src"
    _copy_tree(src)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(base / "dist"), str(src)], check=True,
                   env={**os.environ, "LEVERET_NO_EXTENSIONS": "", **BUILDS[build]})
    (built,) = (base / "dist").glob("leveret-*.whl")
    return built


@pytest.fixture(scope="module")
def clean_venv(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | None]:
    """One venv without system site-packages for both wheels: the second replaces the first
    (the dependencies, the same for both, are fetched once)."""
    env_dir = tmp_path_factory.mktemp("venv") / "venv"
    venv.create(env_dir, with_pip=True, system_site_packages=False)
    return {"dir": env_dir, "holds": None}


@pytest.fixture(scope="module")
def installed(wheel: Path, clean_venv: dict[str, Path | None]) -> Path:
    """The venv holding the wheel and its dependencies from PyPI (a wheel installed before
    is replaced whole: its extension modules go with its record)."""
    env_dir = clean_venv["dir"]
    assert env_dir is not None
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    again = ["--force-reinstall", "--no-deps"] if clean_venv["holds"] else []
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", *again, str(wheel)], check=True, env=env)
    clean_venv["holds"] = wheel
    return env_dir


def test_wheel_carries_every_module_of_the_tree(wheel: Path, build: str) -> None:
    """Every ``.py`` always; beside it, an extension module for each compiled one."""
    with zipfile.ZipFile(wheel) as zf:
        shipped = {n for n in zf.namelist() if n.endswith(".py")}
        extensions = {n.split(".")[0].replace("/", ".") for n in zf.namelist()
                      if n.endswith(".so")}
    assert shipped == _source_modules()
    assert extensions == (set(compiled.COMPILED_MODULES) if build == "compiled" else set())


def test_wheel_carries_the_lab_lessons(wheel: Path) -> None:
    """Lessons are Markdown, shipped as package data next to each lab's code."""
    with zipfile.ZipFile(wheel) as zf:
        lessons = {n for n in zf.namelist() if n.endswith("/lesson.md")}
    expected = {f"leveret/{p.relative_to(ROOT).as_posix()}" for p in ROOT.glob("labs/*/lesson.md")}
    assert expected and lessons == expected


def test_wheel_carries_the_web_console(wheel: Path) -> None:
    """The console's pages, styles and vendored libraries with their licences are package
    data (management_ui/static): all of them, and only them, are in the wheel."""
    with zipfile.ZipFile(wheel) as zf:
        shipped = {n for n in zf.namelist() if n.startswith("leveret/management_ui/static/")}
    expected = {f"leveret/{p.relative_to(ROOT).as_posix()}"
                for p in (ROOT / "management_ui" / "static").rglob("*") if p.is_file()}
    assert "leveret/management_ui/static/index.html" in expected
    assert "leveret/management_ui/static/vendor/uplot/LICENSE" in expected
    assert shipped == expected


def test_every_module_imports_from_the_installed_wheel(installed: Path, tmp_path: Path) -> None:
    out = subprocess.run([str(installed / "bin" / "python"), "-c", WALK.format(optional=OPTIONAL)],
                         capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONNOUSERSITE": "1"})
    assert out.returncode == 0, out.stderr
    imported = set(out.stdout.split())
    assert {"leveret.amqp.handlers.queue", "leveret.amqp.server", "leveret.node.process",
            "leveret.cli"} <= imported


def test_installed_broker_serves_every_amqp_class(installed: Path, build: str,
                                                   tmp_path: Path) -> None:
    """`leveret serve` from the venv; a pika session over connection, channel, exchange,
    queue, basic, tx and confirm; SIGTERM; exit 0 and no traceback in the log. The log
    and the overview say which build ran."""
    version = subprocess.run([str(installed / "bin" / "leveret"), "--version"],
                             capture_output=True, text=True, check=True, cwd=tmp_path)
    assert "0.1.0" in version.stdout + version.stderr
    broker = BrokerProcess(tmp_path / "data", tmp_path / "broker.log",
                           command=[str(installed / "bin" / "leveret")],
                           env={"PYTHONNOUSERSITE": "1", "LEVERET_NO_EXTENSIONS": ""})
    broker.start()
    try:
        _pika_session(broker.port)
        _console_served(broker.api_url)
        running = _overview(broker.api_url)["leveret_extensions"]
    finally:
        code = broker.stop()
    log = broker.log_text()
    assert code == 0, log[-4000:]
    assert "Traceback" not in log and "INTERNAL_ERROR" not in log, log[-4000:]
    assert running == EXPECTED[build]
    assert ("hot path compiled (" if build == "compiled" else
            "hot path in pure Python (no compiled modules installed)") in log


def test_no_extensions_runs_the_python_source(installed: Path, build: str,
                                              tmp_path: Path) -> None:
    """``LEVERET_NO_EXTENSIONS=1`` at run time: the installed compiled modules stay unused."""
    if build != "compiled":
        pytest.skip("only a compiled install has compiled modules to leave unused")
    broker = BrokerProcess(tmp_path / "data", tmp_path / "broker.log",
                           command=[str(installed / "bin" / "leveret")],
                           env={"PYTHONNOUSERSITE": "1", "LEVERET_NO_EXTENSIONS": "1"})
    broker.start()
    try:
        _pika_session(broker.port)
        running = _overview(broker.api_url)["leveret_extensions"]
    finally:
        code = broker.stop()
    log = broker.log_text()
    assert code == 0, log[-4000:]
    assert running == "pure"
    assert "hot path in pure Python (LEVERET_NO_EXTENSIONS is set)" in log


def _overview(base: str) -> dict[str, object]:
    request = urllib.request.Request(f"{base}/api/overview", headers={
        "Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()})
    with urllib.request.urlopen(request) as response:
        body: dict[str, object] = json.loads(response.read())
    return body


def _pika_session(port: int) -> None:
    params = pika.ConnectionParameters("127.0.0.1", port, "/",
                                       pika.PlainCredentials("guest", "guest"))
    conn = pika.BlockingConnection(params)  # connection.start/tune/open
    ch = conn.channel()  # channel.open
    # exchange: declare, exchange-to-exchange bind/unbind, delete
    ch.exchange_declare("pk.x", "direct", durable=True)
    ch.exchange_declare("pk.fan", "fanout")
    ch.exchange_bind(destination="pk.fan", source="pk.x", routing_key="k")
    ch.exchange_unbind(destination="pk.fan", source="pk.x", routing_key="k")
    ch.exchange_delete("pk.fan")
    # queue: declare, bind, purge, unbind, delete
    q = ch.queue_declare("pk.q", durable=True).method.queue
    ch.queue_bind(q, "pk.x", routing_key="k")
    ch.basic_publish("pk.x", "k", b"to purge")
    _wait(lambda: ch.queue_declare(q, passive=True).method.message_count == 1)
    assert ch.queue_purge(q).method.message_count == 1
    # confirm: select, persistent publishes confirmed
    ch.confirm_delivery()
    for i in range(5):
        ch.basic_publish("pk.x", "k", f"m{i}".encode(),
                         pika.BasicProperties(delivery_mode=2), mandatory=True)
    # basic: get + ack, get + nack(requeue), get + reject(no requeue)
    ch.basic_qos(prefetch_count=10)
    method, _props, body = ch.basic_get(q)
    assert body == b"m0"
    ch.basic_ack(method.delivery_tag)
    method, _props, body = ch.basic_get(q)
    assert body == b"m1"
    ch.basic_nack(method.delivery_tag, requeue=True)
    method, _props, body = ch.basic_get(q)
    assert body == b"m1" and method.redelivered
    ch.basic_reject(method.delivery_tag, requeue=False)
    # basic: consume, recover, cancel
    seen: list[tuple[bytes, bool]] = []
    tag = ch.basic_consume(q, lambda c, m, p, b: seen.append((b, m.redelivered)))
    _wait(lambda: (conn.process_data_events(0.05), len(seen) == 3)[1])
    assert [b for b, _ in seen] == [b"m2", b"m3", b"m4"]
    ch.basic_recover(requeue=True)
    _wait(lambda: (conn.process_data_events(0.05), len(seen) == 6)[1])
    assert all(redelivered for _, redelivered in seen[3:])
    ch.basic_cancel(tag)
    ch.queue_unbind(q, "pk.x", routing_key="k")
    # tx: select, rollback, commit (on a channel of its own: tx and confirm do not mix)
    tx = conn.channel()
    tx.tx_select()
    tx.basic_publish("", q, b"rolled back")
    tx.tx_rollback()
    tx.basic_publish("", q, b"committed")
    tx.tx_commit()
    method, _props, body = tx.basic_get(q, auto_ack=True)
    assert body == b"committed"
    tx.close()
    assert ch.queue_delete(q).method.message_count == 0
    ch.exchange_delete("pk.x")
    ch.close()  # channel.close
    conn.close()  # connection.close


def _console_served(base: str) -> None:
    """The installed broker serves the console page and every asset it names."""
    with urllib.request.urlopen(f"{base}/") as response:
        html = response.read().decode()
    assets = re.findall(r'(?:src|href)="(/console/[^"]+)"', html)
    assert "/console/app.js" in assets and "/console/vendor/uplot/uPlot.iife.min.js" in assets
    for asset in [*assets, "/console/pages/queue.js", "/console/vendor/uplot/LICENSE"]:
        with urllib.request.urlopen(f"{base}{asset}") as response:
            assert response.status == 200 and response.read(), asset


def _wait(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_python_started_in_the_repository_root_imports_pypis_amqp() -> None:
    """``amqp/`` is a namespace portion, so PyPI's ``amqp`` (kombu's transport) wins."""
    out = subprocess.run([sys.executable, "-c", "import amqp, kombu; print(amqp.__file__)"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "site-packages" in out.stdout, out.stdout
