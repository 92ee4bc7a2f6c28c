"""Package discovery for the ``leveret`` wheel (all other metadata is in pyproject.toml).

The repository root is the import package ``leveret`` (``package-dir`` in
pyproject.toml). Every folder below it that holds Python code is a subpackage,
found here at build time instead of listed by hand, so a new folder or module
cannot be left out of the wheel; ``tests/test_packaging.py`` checks the built
wheel against the tree. ``amqp/`` has no ``__init__.py`` on purpose (it is a
namespace portion): a ``python`` started in the repository root then still
imports PyPI's ``amqp`` (kombu's transport) instead of this folder.
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup
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


setup(
    packages=["leveret", *(f"leveret.{name}" for name in subpackages())],
    cmdclass={"build_py": BuildPy},
)
