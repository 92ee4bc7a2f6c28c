"""Imports happen at import time: a missing module fails when the broker starts.

A function-local import once hid a subpackage missing from the wheel until a
client's first ``queue.declare``. Imports inside functions are allowed only for
the reasons listed here (optional heavy extras), each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_SHIPPED = {"tests", "bench", "examples", "build", "dist"}

# (module path, imported module): why it may be imported inside a function.
ALLOWED = {
    ("spark_sink/__init__.py", ".datasource"): "pyspark is an optional extra",
    ("spark_sink/__init__.py", ".publisher"): "keeps `import leveret.spark_sink` Spark-free",
    ("spark_sink/publisher.py", "pyspark"): "pyspark is an optional extra",
    ("spark_sink/publisher.py", "."): "runs on Spark executors, registers lazily",
}


def _shipped_modules() -> list[Path]:
    return [p for p in ROOT.rglob("*.py")
            if p.relative_to(ROOT).parts[0] not in NOT_SHIPPED
            and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)
            and p.name != "setup.py"]


def _local_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Import):
                found += [(node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def test_no_function_local_imports_outside_the_allow_list() -> None:
    offenders = []
    for path in _shipped_modules():
        rel = path.relative_to(ROOT).as_posix()
        for lineno, module in _local_imports(ast.parse(path.read_text(), rel)):
            if (rel, module) not in ALLOWED:
                offenders.append(f"{rel}:{lineno} imports {module} inside a function")
    assert not offenders, "\n".join(offenders)


def test_the_allow_list_has_no_stale_entries() -> None:
    seen = {(p.relative_to(ROOT).as_posix(), m) for p in _shipped_modules()
            for _, m in _local_imports(ast.parse(p.read_text()))}
    assert set(ALLOWED) <= seen, set(ALLOWED) - seen
