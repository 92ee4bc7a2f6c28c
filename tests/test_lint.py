"""ruff's and mypy's checks hold for the whole tree, and typing coverage does not slide."""

import ast
import fnmatch
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise",
                             str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean(tmp_path: Path) -> None:
    """mypy over the package as installed (``leveret.*``): pyproject's [tool.mypy], strict
    on the seams listed there. The repository root is the package, so a symlink named
    ``leveret`` gives mypy the module names the code imports."""
    (tmp_path / "leveret").symlink_to(ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--python-executable", sys.executable, "--no-incremental", "-p", "leveret"],
        capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


# -- typing coverage: printed every run, and a ratchet ------------------------------------------

PACKAGES = ("amqp", "broker", "management_ui", "node", "queues", "exchanges", "persistence",
            "model", "confirms", "spark_sink", "cluster")
# Per package: the least share of lines checked strictly, and the most parameters, returns and
# variables annotated as plain ``Any``. Raise a floor (or lower a ceiling) when a change beats
# it, so it never slides back.
STRICT_FLOOR = {"amqp": 23, "broker": 100, "management_ui": 100, "node": 100, "queues": 100,
                "exchanges": 0,
                "persistence": 0, "model": 100, "confirms": 100, "spark_sink": 0,
                "cluster": 100}
BARE_ANY_CEILING = {"amqp": 10, "broker": 62, "management_ui": 84, "node": 1, "queues": 34,
                    "exchanges": 5, "persistence": 20, "model": 9, "confirms": 0,
                    "spark_sink": 17, "cluster": 4}


def _bare_any(tree: ast.AST) -> int:
    """Annotations that are exactly ``Any`` (not ``dict[str, Any]``): an untyped seam."""
    found = 0
    for node in ast.walk(tree):
        annotations: list[ast.expr | None] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            annotations = [a.annotation for a in [*args.posonlyargs, *args.args,
                                                  *args.kwonlyargs]]
            annotations += [node.returns, args.vararg and args.vararg.annotation,
                            args.kwarg and args.kwarg.annotation]
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        found += sum(1 for a in annotations
                     if (isinstance(a, ast.Name) and a.id == "Any")
                     or (isinstance(a, ast.Constant) and a.value == "Any"))
    return found


def _strict_modules() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    return [module for override in config.get("overrides", [])
            if override.get("disallow_untyped_defs")
            for module in override["module"]]


def typing_coverage() -> dict[str, tuple[int, int, int]]:
    """Per package: (lines, lines checked strictly, bare ``Any`` annotations)."""
    strict = _strict_modules()
    coverage = {}
    for package in PACKAGES:
        lines = strict_lines = bare = 0
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text()
            count = text.count("\n")
            module = ".".join(["leveret", *path.relative_to(ROOT).with_suffix("").parts])
            lines += count
            if any(fnmatch.fnmatchcase(module, pattern) for pattern in strict):
                strict_lines += count
            bare += _bare_any(ast.parse(text))
        coverage[package] = (lines, strict_lines, bare)
    return coverage


def test_typing_coverage_does_not_slide(capsys: pytest.CaptureFixture[str]) -> None:
    coverage = typing_coverage()
    with capsys.disabled():
        print("\nstrict mypy share and bare Any, per package:")
        for package, (lines, strict_lines, bare) in coverage.items():
            print(f"  {package:14} {strict_lines:6}/{lines:<6} lines strict "
                  f"({100 * strict_lines // max(lines, 1):3}%), {bare:4} bare Any")
    slid = [f"{p}: {100 * s // max(n, 1)}% strict < {STRICT_FLOOR[p]}%"
            for p, (n, s, _) in coverage.items() if 100 * s // max(n, 1) < STRICT_FLOOR[p]]
    slid += [f"{p}: {b} bare Any > {BARE_ANY_CEILING[p]}"
             for p, (_, _, b) in coverage.items() if b > BARE_ANY_CEILING[p]]
    assert not slid, "\n".join(slid)
