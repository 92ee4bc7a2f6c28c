"""Package discovery for the ``leveret`` wheel (all other metadata is in pyproject.toml).

The repository root is the import package ``leveret`` (``package-dir`` in
pyproject.toml). Every folder below it that holds Python code is a subpackage,
found here at build time instead of listed by hand, so a new folder or module
cannot be left out of the wheel; ``tests/test_packaging.py`` checks the built
wheel against the tree. ``amqp/`` has no ``__init__.py`` on purpose (it is a
namespace portion): a ``python`` started in the repository root then still
imports PyPI's ``amqp`` (kombu's transport) instead of this folder.

The hot-path modules listed in ``node/compiled.py`` are compiled by Cython (pure-Python
mode: the ``.py`` is the source; a ``.pxd`` beside it may add C types) when Cython and a C
compiler are there. Compiling is optional, as in msgpack's setup.py: any failure prints
one line and the wheel ships the pure Python modules, which behave the same.
``LEVERET_NO_EXTENSIONS=1`` skips compiling; so does an editable install, where a compiled
module beside its source would shadow every later edit of the ``.py``.
"""

import os
import platform
import runpy
import shutil
from pathlib import Path

from setuptools import Extension, find_namespace_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# Folders of the repository that are not part of the installed broker.
NOT_SHIPPED = ["tests", "bench", "examples", "docs", "build", "dist"]


def subpackages() -> list[str]:
    found = find_namespace_packages(
        where=str(ROOT),
        exclude=[*NOT_SHIPPED, *(f"{name}.*" for name in NOT_SHIPPED), "*__pycache__*"],
    )
    # Only folders with Python modules: data-only folders travel as package data.
    return [name for name in found if any((ROOT / name.replace(".", "/")).glob("*.py"))]


class BuildPy(build_py):
    """Leaves this script out: the root's modules are ``leveret``'s, but not this one."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if (m[0], m[1]) != ("leveret", "setup")]


def say(message: str) -> None:
    """One line in the build's output (pip shows it with ``-v``)."""
    print(f"leveret: {message}", flush=True)


def extensions() -> list[Extension]:
    """The compiled hot-path modules, or none when they cannot or should not be built."""
    if os.environ.get("LEVERET_NO_EXTENSIONS", "") not in ("", "0"):
        say("LEVERET_NO_EXTENSIONS is set: pure Python build")
        return []
    if platform.python_implementation() != "CPython":
        say("not CPython: pure Python build")
        return []
    try:
        import Cython  # noqa: F401  (build_ext cythonizes; here only: is it there?)
    except ImportError:
        say("Cython is not installed: pure Python build")
        return []
    build = runpy.run_path(str(ROOT / "node" / "compiled.py"))
    modules = []
    for name in build["COMPILED_MODULES"]:
        ext = Extension(name, [name.removeprefix("leveret.").replace(".", "/") + ".py"])
        # A module's annotations stay hints unless it is one whose callers the oracle
        # tests cover with every argument type they pass (BuildExt reads this).
        ext.annotation_typing = name in build["TYPED_BY_ANNOTATIONS"]  # type: ignore[attr-defined]
        modules.append(ext)
    return modules


class BuildExt(build_ext):
    """Compiles what it can; a module that fails to compile ships as pure Python."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if self.parallel is None:  # pip passes no options: compile on every core
            self.parallel = os.cpu_count() or 1

    def run(self) -> None:
        if getattr(self, "editable_mode", False):
            say("editable install: pure Python (a compiled module would hide edits)")
            return
        try:
            from Cython.Build import cythonize

            generated = {}
            pxd_tree = self._pxd_tree()
            for typed in (True, False):
                group = [ext for ext in self.extensions
                         if getattr(ext, "annotation_typing", True) is typed]
                generated.update({ext.name: ext.sources for ext in cythonize(
                    group, compiler_directives={"language_level": "3",
                                                "annotation_typing": typed},
                    build_dir=os.path.join(self.build_temp, "cython" if typed else "cython-hints"),
                    quiet=True, include_path=[pxd_tree],
                    nthreads=self.parallel or 1)} if group else {})
            for ext in self.extensions:  # the same objects: setuptools annotated them
                ext.sources = generated[ext.name]
            super().run()
            if self.inplace:
                self._stamp()
        except Exception as exc:  # Cython's errors, no compiler at all, a broken toolchain
            say(f"compiling failed ({exc}): pure Python build")

    def _stamp(self) -> None:
        """Beside each module compiled in place, the digest of the source it came from:
        ``node/compiled.py`` runs the ``.py`` of a module edited since (a stale extension
        module would otherwise hide the edit)."""
        build = runpy.run_path(str(ROOT / "node" / "compiled.py"))
        for ext in self.extensions:
            source = ROOT / (ext.name.removeprefix("leveret.").replace(".", "/") + ".py")
            if Path(self.get_ext_fullpath(ext.name)).exists():
                build["stamp_of"](source).write_text(build["source_digest"](source) + "\n")

    def _pxd_tree(self) -> str:
        """The ``.pxd`` files laid out under their package names: Cython looks a module's
        ``.pxd`` up as ``leveret/amqp/frames.pxd``, which the repository (the package
        ``leveret`` itself) does not have."""
        tree = Path(self.build_temp) / "pxd"
        (tree / "leveret").mkdir(parents=True, exist_ok=True)
        init = tree / "leveret" / "__init__.py"
        if not init.exists():
            init.touch()
        for ext in self.extensions:
            source = ROOT / (ext.name.removeprefix("leveret.").replace(".", "/") + ".pxd")
            target = tree / (ext.name.replace(".", "/") + ".pxd")
            if source.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                # With the source's time: Cython rebuilds a module only when a .pxd it
                # depends on is newer than its C file (a copy stamped now rebuilt all).
                shutil.copy2(source, target)
            else:
                target.unlink(missing_ok=True)
        return str(tree)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:  # CC=false, missing Python.h, ...
            say(f"compiling {ext.name} failed ({exc}): it runs as pure Python")


setup(
    packages=["leveret", *(f"leveret.{name}" for name in subpackages())],
    cmdclass={"build_py": BuildPy, "build_ext": BuildExt},
    ext_modules=extensions(),
)
