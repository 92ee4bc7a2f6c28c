"""Choosing the build at run time: ``LEVERET_NO_EXTENSIONS`` and what the broker reports."""

from __future__ import annotations

import importlib
import importlib.machinery
import runpy
import sys
from pathlib import Path

import pytest

from leveret.node import compiled

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("value", "pure"), [(None, False), ("", False), ("0", False),
                                             ("1", True), ("yes", True)])
def test_no_extensions_is_any_value_but_empty_or_zero(value: str | None, pure: bool) -> None:
    env = {} if value is None else {compiled.NO_EXTENSIONS_ENV: value}
    assert compiled.disabled(env) is pure


def test_the_pure_finder_finds_the_source_of_compiled_modules_only() -> None:
    finder = compiled.PureFinder()
    spec = finder.find_spec("leveret.amqp.frames", [str(ROOT / "amqp")])
    assert spec is not None and spec.origin == str(ROOT / "amqp" / "frames.py")
    assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    assert finder.find_spec("leveret.amqp.handshake", [str(ROOT / "amqp")]) is None
    assert finder.find_spec("leveret.amqp.frames", None) is None


def test_honour_env_installs_the_finder_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path
                                           if not isinstance(f, compiled.PureFinder)])
    compiled.honour_env({})
    assert not any(isinstance(f, compiled.PureFinder) for f in sys.meta_path)
    compiled.honour_env({compiled.NO_EXTENSIONS_ENV: "1"})
    compiled.honour_env({compiled.NO_EXTENSIONS_ENV: "1"})
    assert isinstance(sys.meta_path[0], compiled.PureFinder)
    assert sum(isinstance(f, compiled.PureFinder) for f in sys.meta_path) == 1


def test_the_build_and_the_log_line_say_which_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    running = compiled.build()
    assert running in ("compiled", "pure", "partial")
    text = compiled.describe()
    if running == "pure":
        monkeypatch.setenv(compiled.NO_EXTENSIONS_ENV, "1")
        assert compiled.describe() == "hot path in pure Python (LEVERET_NO_EXTENSIONS is set)"
        monkeypatch.delenv(compiled.NO_EXTENSIONS_ENV)
        monkeypatch.setattr(compiled.STALE_GUARD, "stale", set())  # a tree built in place once
        assert compiled.describe() == "hot path in pure Python (no compiled modules installed)"
    else:
        assert text.startswith("hot path ") and "compiled (leveret.amqp." in text


def test_every_compiled_module_has_its_source_in_the_tree() -> None:
    """setup.py reads the list from node/compiled.py; each entry is a module of the tree."""
    names = runpy.run_path(str(ROOT / "node" / "compiled.py"))["COMPILED_MODULES"]
    assert names == compiled.COMPILED_MODULES
    for name in names:
        assert (ROOT / (name.removeprefix("leveret.").replace(".", "/") + ".py")).is_file()


def test_a_module_edited_since_compiled_in_place_runs_from_source(tmp_path: Path) -> None:
    """``build_ext --inplace`` stamps each module with its source's digest; an edit after
    that makes the guard pick the ``.py`` over the stale extension beside it, and the ``.py``
    of every other hot-path module too (compiled ones cimport the edited one's layout)."""
    package = tmp_path / "amqp"
    package.mkdir()
    source, other = package / "frames.py", package / "fastpath.py"
    for module in (source, other):
        module.write_text("X = 1\n")
        module.with_suffix(".cpython-311-x86_64-linux-gnu.so").write_bytes(b"not loaded here")
    guard = compiled.StaleGuard()
    assert guard.find_spec("leveret.amqp.frames", [str(package)]) is None  # no stamp: a wheel
    for module in (source, other):
        compiled.stamp_of(module).write_text(compiled.source_digest(module) + "\n")
    assert compiled.stamp_of(source).name == "frames.compiled-from"
    assert guard.find_spec("leveret.amqp.frames", [str(package)]) is None  # fresh
    assert not guard.stale
    source.write_text("X = 22\n")  # the guard re-hashes a tree whose files changed size or time
    spec = guard.find_spec("leveret.amqp.frames", [str(package)])
    assert spec is not None and spec.origin == str(source)
    assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    assert guard.stale == {"leveret.amqp.frames"}
    spec = guard.find_spec("leveret.amqp.fastpath", [str(package)])  # not edited, yet source
    assert spec is not None and spec.origin == str(other)
    assert guard.stale == {"leveret.amqp.frames"}
    source.write_text("X = 1\n")
    assert guard.find_spec("leveret.amqp.fastpath", [str(package)]) is None  # fresh again
    (package / "frames.pxd").write_text("cdef int X\n")  # a new .pxd is an edit too
    assert guard.find_spec("leveret.amqp.fastpath", [str(package)]) is not None
    assert guard.find_spec("leveret.amqp.handshake", [str(package)]) is None


def test_the_stale_guard_is_always_installed() -> None:
    assert compiled.STALE_GUARD in sys.meta_path


def test_the_log_line_names_stale_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in compiled.COMPILED_MODULES:
        importlib.import_module(name)
    monkeypatch.setattr(compiled, "build", lambda: "partial")
    monkeypatch.setattr(compiled, "is_compiled", lambda module: module.__name__.endswith("frames"))
    monkeypatch.setattr(compiled.STALE_GUARD, "stale", {"leveret.amqp.fastpath"})
    assert compiled.describe() == (
        "hot path partly compiled (leveret.amqp.frames); edited since compiled, so run from"
        " source: leveret.amqp.fastpath (python setup.py build_ext --inplace rebuilds them)")


def test_the_log_line_says_why_a_stale_tree_runs_pure(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(compiled.NO_EXTENSIONS_ENV, raising=False)
    monkeypatch.setattr(compiled, "build", lambda: "pure")
    monkeypatch.setattr(compiled.STALE_GUARD, "stale", {"leveret.amqp.fastpath"})
    assert compiled.describe() == (
        "hot path in pure Python (edited since compiled: leveret.amqp.fastpath;"
        " python setup.py build_ext --inplace rebuilds them)")
