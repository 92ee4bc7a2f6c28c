"""The import graph: layered packages, and imports that happen at import time.

Packages form layers; each may import only the layers below it, so there is no
cycle between packages and each front door (AMQP, HTTP, ctl, metrics) reaches
the broker model through ``leveret.broker``. ``TYPE_CHECKING`` imports count
too: a seam typed by importing the other side's class is a cycle in disguise
(use a small ``typing.Protocol`` instead).

A function-local import once hid a subpackage missing from the wheel until a
client's first ``queue.declare``. Imports inside functions are allowed only for
the reasons listed here (optional heavy extras), each with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOT_SHIPPED = {"tests", "bench", "examples", "docs", "build", "dist"}

# (module path, imported module): why it may be imported inside a function.
ALLOWED = {
    ("spark_sink/__init__.py", ".datasource"): "pyspark is an optional extra",
    ("spark_sink/__init__.py", ".publisher"): "keeps `import leveret.spark_sink` Spark-free",
    ("spark_sink/publisher.py", "pyspark"): "pyspark is an optional extra",
    ("spark_sink/publisher.py", "."): "runs on Spark executors, registers lazily",
}


# Bottom to top. Root modules (config, cli, ctl) sit above all packages, except
# ``config``, a leaf that anything may import.
LAYERS = ["model", "exchanges", "confirms", "persistence", "queues", "broker", "node", "cluster", "amqp",
          "management_ui", "spark_sink", "labs"]
LEAVES = {"config"}


def _imported_packages(path: Path) -> set[str]:
    """The leveret packages (or root modules) ``path`` imports, TYPE_CHECKING included."""
    rel = path.relative_to(ROOT)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(rel))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel.parts[:-1])[: len(rel.parts) - node.level]
                names = [".".join(["leveret", *base, *([node.module] if node.module else [])])]
            else:
                names = [node.module or ""]
        for name in names:
            parts = name.split(".")
            if parts[0] == "leveret" and len(parts) > 1:
                found.add(parts[1])
    return found


def test_packages_import_only_the_layers_below_them() -> None:
    offenders = []
    for path in _shipped_modules():
        rel = path.relative_to(ROOT)
        if len(rel.parts) == 1:
            continue  # root modules: the top, checked below for config
        own = LAYERS.index(rel.parts[0])
        for target in _imported_packages(path) - {rel.parts[0]} - LEAVES:
            if target not in LAYERS or LAYERS.index(target) > own:
                offenders.append(f"{rel.as_posix()} imports leveret.{target}")
    assert not offenders, "\n".join(sorted(offenders))


# Front doors reach the model through ``broker`` only (its ``api`` names what they need from
# below), so how the model is built can change without them.
FRONT_DOORS = {"management_ui": {"broker", "model", "node"}}


def test_front_doors_reach_the_model_through_broker() -> None:
    offenders = []
    for path in _shipped_modules():
        rel = path.relative_to(ROOT)
        allowed = FRONT_DOORS.get(rel.parts[0])
        if allowed is None or len(rel.parts) == 1:
            continue
        for target in _imported_packages(path) - {rel.parts[0]} - LEAVES - allowed:
            offenders.append(f"{rel.as_posix()} imports leveret.{target}")
    assert not offenders, "\n".join(sorted(offenders))


def test_every_package_has_a_layer() -> None:
    packages = {p.relative_to(ROOT).parts[0] for p in _shipped_modules()
                if len(p.relative_to(ROOT).parts) > 1}
    assert packages == set(LAYERS)


def test_config_is_a_leaf() -> None:
    # config.py takes its value kinds and checks from config_values.py, itself a leaf.
    assert _imported_packages(ROOT / "config.py") == {"config_values"}
    assert _imported_packages(ROOT / "config_values.py") == set()


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
