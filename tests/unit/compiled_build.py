"""Both builds of the hot-path modules side by side, for the tests that compare them.

The pure module is always loaded from its ``.py`` (under a private name). The compiled one
is the installed extension module when the tree runs compiled; otherwise (the editable
install runs pure Python) it is built here with ``setup.py build_ext`` into
``build/oracle-<digest>/``, once per version of the sources, and loaded from there.

Where it cannot be built (no Cython, no C compiler) the tests skip, saying why, except
under CI with a compiler present: there a missing compiled build is a failure, so the
comparison never goes quiet by accident.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from leveret.node import compiled

ROOT = Path(__file__).resolve().parents[2]


def _source(name: str) -> Path:
    return ROOT / (name.removeprefix("leveret.").replace(".", "/") + ".py")


def pure(name: str) -> ModuleType:
    """``name`` run from its ``.py``, whatever the import system would pick."""
    return _pure(name)


@cache
def _pure(name: str) -> ModuleType:
    alias = name.rpartition(".")[0] + "._pure_" + name.rpartition(".")[2]
    spec = importlib.util.spec_from_file_location(alias, _source(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _digest() -> str:
    h = hashlib.sha256()
    for name in compiled.COMPILED_MODULES:
        for path in (_source(name), _source(name).with_suffix(".pxd")):
            if path.exists():
                h.update(path.read_bytes())
    h.update((ROOT / "setup.py").read_bytes())
    h.update((ROOT / "node" / "compiled.py").read_bytes())  # which modules, which typed
    h.update(sys.version.encode())
    return h.hexdigest()[:16]


def _unavailable(reason: str) -> None:
    """Skip, or fail under CI where a C compiler is there to build with."""
    compiler = os.environ.get("CC") or str(sysconfig.get_config_var("CC") or "cc").split()[0]
    if os.environ.get("CI") == "true" and shutil.which(compiler):
        pytest.fail(f"COMPILED BUILD MISSING under CI with a C compiler: {reason}")
    pytest.skip(f"COMPILED BUILD NOT TESTED: {reason}")


@cache
def _build() -> tuple[Path | None, str]:
    """The directory holding the compiled modules (built if need be), or why there is none."""
    out = ROOT / "build" / f"oracle-{_digest()}"
    done = out / "done"
    if not done.exists():
        run = subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(out / "lib"),
             "--build-temp", str(out / "tmp")],
            cwd=ROOT, capture_output=True, text=True, env={**os.environ,
                                                            "LEVERET_NO_EXTENSIONS": ""})
        if run.returncode != 0:
            return None, f"setup.py build_ext failed: {run.stdout[-2000:]}{run.stderr[-2000:]}"
        if "pure Python" in run.stdout:  # setup.py's one line when it falls back
            return None, run.stdout.strip()[-2000:]
        done.write_text("ok\n")
    return out / "lib", ""


def compiled_module(name: str) -> ModuleType:
    """``name`` as an extension module compiled from the same source."""
    installed = importlib.import_module(name)
    if compiled.is_compiled(installed):
        return installed
    return _load_built(name)


@cache
def _load_built(name: str) -> ModuleType:
    lib, why = _build()
    if lib is None:
        _unavailable(why)
        raise AssertionError("unreachable")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    path = lib / (name.replace(".", "/") + str(suffix))
    if not path.exists():
        _unavailable(f"{path} was not built")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert compiled.is_compiled(module), module
    return module
