"""Choosing the build at run time: ``LEVERET_NO_EXTENSIONS`` and what the broker reports."""

from __future__ import annotations

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
    assert finder.find_spec("leveret.amqp.channel", [str(ROOT / "amqp")]) is None
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
        assert compiled.describe() == "hot path in pure Python (no compiled modules installed)"
    else:
        assert text.startswith("hot path ") and "compiled (leveret.amqp." in text


def test_every_compiled_module_has_its_source_in_the_tree() -> None:
    """setup.py reads the list from node/compiled.py; each entry is a module of the tree."""
    names = runpy.run_path(str(ROOT / "node" / "compiled.py"))["COMPILED_MODULES"]
    assert names == compiled.COMPILED_MODULES
    for name in names:
        assert (ROOT / (name.removeprefix("leveret.").replace(".", "/") + ".py")).is_file()
