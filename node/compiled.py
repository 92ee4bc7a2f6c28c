"""Which build of the hot-path modules runs: compiled by Cython, or their Python source.

The modules in ``COMPILED_MODULES`` are plain Python and the only source of their code;
``setup.py`` compiles each with Cython in pure-Python mode (a ``.pxd`` beside it may add C
types) into an extension module of the same name, which Python's import system then
prefers to the ``.py``. Where compiling was not possible (no C compiler, no Cython, an
editable install) the ``.py`` runs, with the same behaviour. ``LEVERET_NO_EXTENSIONS=1``
forces the ``.py`` at run time even where a compiled module is installed (the package's
``__init__`` calls :func:`honour_env` before anything imports them), so the two builds
can be compared on one installation.

What it buys so far (``bench/icount.py``, instructions per message): these two modules
compiled untyped took the transient path from 100.3k to 96.1k and a relayed row from 259.7k
to 257.5k; after the pure-Python trims that both builds share, 91.7k compiled against
91.7-94.3k pure, and 251.3k against 252.2k. The rest is spread over the connection, channel
and queue modules, the next ones to compile.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Final, Literal

# The modules setup.py compiles (it reads this tuple); each is ``leveret/<path>.py``.
COMPILED_MODULES: Final = ("leveret.amqp.frames", "leveret.amqp.fastpath")
NO_EXTENSIONS_ENV: Final = "LEVERET_NO_EXTENSIONS"

Build = Literal["compiled", "pure", "partial"]


def disabled(env: Mapping[str, str] = os.environ) -> bool:
    """Whether ``LEVERET_NO_EXTENSIONS`` asks for pure Python (any value but empty or 0)."""
    return env.get(NO_EXTENSIONS_ENV, "") not in ("", "0")


class PureFinder(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` source of a compiled module, ahead of the path finder that
    would pick the extension module beside it."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED_MODULES or not path:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path:
            source = Path(entry) / leaf
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def honour_env(env: Mapping[str, str] = os.environ) -> None:
    """Install :class:`PureFinder` when ``LEVERET_NO_EXTENSIONS`` says so (once)."""
    if disabled(env) and not any(isinstance(f, PureFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, PureFinder())


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from an extension module rather than its source."""
    return isinstance(getattr(module.__spec__, "loader", None),
                      importlib.machinery.ExtensionFileLoader)


def build() -> Build:
    """``compiled`` when every hot-path module runs compiled, ``pure`` when none does."""
    count = sum(is_compiled(importlib.import_module(name)) for name in COMPILED_MODULES)
    if count == len(COMPILED_MODULES):
        return "compiled"
    return "pure" if count == 0 else "partial"


def describe() -> str:
    """One phrase for the start-up log: which build runs, and why pure when it is."""
    running = build()
    if running == "compiled":
        return "hot path compiled (" + ", ".join(COMPILED_MODULES) + ")"
    if running == "partial":
        return "hot path partly compiled (" + ", ".join(
            name for name in COMPILED_MODULES if is_compiled(sys.modules[name])) + ")"
    why = f"{NO_EXTENSIONS_ENV} is set" if disabled() else "no compiled modules installed"
    return f"hot path in pure Python ({why})"
