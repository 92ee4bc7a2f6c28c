"""The ``.pxd`` files that make hot classes extension types when compiled, checked on both
builds: an attribute the ``.py`` assigns but its ``.pxd`` does not declare would be an
``AttributeError`` only in the compiled broker, so it is caught here, from the sources."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from leveret.node import compiled

ROOT = Path(__file__).resolve().parents[2]
CLASS_RE = re.compile(r"^cdef class (\w+)", re.MULTILINE)
# ``cdef class Stream(Queue):``: an extension subclass, which has its base's fields too.
BASE_RE = re.compile(r"^cdef class (\w+)\((\w+)\)", re.MULTILINE)
# ``cdef public long long seq``, ``cdef public object a, b`` or ``cdef long long[::1] c``:
# the type, then the names.
FIELD_RE = re.compile(r"^\s+cdef (?:public |readonly )?([\w, \[\]:]+)$", re.MULTILINE)


def declared(pxd: str) -> dict[str, set[str]]:
    """Each ``cdef class`` of a ``.pxd`` and the fields it declares."""
    out: dict[str, set[str]] = {}
    starts = list(CLASS_RE.finditer(pxd))
    for i, match in enumerate(starts):
        body = pxd[match.end():starts[i + 1].start() if i + 1 < len(starts) else len(pxd)]
        names = out[match.group(1)] = set()
        for line in FIELD_RE.findall(body):
            first, *rest = line.split(",")
            names.update([first.split()[-1], *(name.strip() for name in rest)])
    return out


def assigned(source: str, name: str) -> set[str]:
    """The attributes class ``name`` assigns on ``self`` anywhere in its body."""
    (cls,) = (node for node in ast.parse(source).body
              if isinstance(node, ast.ClassDef) and node.name == name)
    names = set()
    for node in ast.walk(cls):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for target in targets:
            for part in ast.walk(target):
                if (isinstance(part, ast.Attribute) and isinstance(part.ctx, ast.Store)
                        and isinstance(part.value, ast.Name) and part.value.id == "self"):
                    names.add(part.attr)
    return names


PXDS = sorted(p for name in compiled.COMPILED_MODULES
              if (p := ROOT / (name.removeprefix("leveret.").replace(".", "/") + ".pxd")).exists())


def test_the_per_message_classes_have_declarations() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PXDS}
    assert {"amqp/channel.pxd", "amqp/connection.pxd", "queues/queue.pxd",
            "queues/entry.pxd", "model/message.pxd"} <= names


@pytest.mark.parametrize("pxd", PXDS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_attribute_a_class_assigns_is_declared(pxd: Path) -> None:
    source = pxd.with_suffix(".py").read_text()
    classes = declared(pxd.read_text())
    everywhere = {name: fields for p in PXDS for name, fields in declared(p.read_text()).items()}
    bases = dict(BASE_RE.findall(pxd.read_text()))
    for name, fields in classes.items():
        if name in bases:
            fields = fields | everywhere[bases[name]]
        missing = assigned(source, name) - fields
        assert not missing, f"{pxd.name}: {name} assigns undeclared {sorted(missing)}"


def test_the_checker_sees_a_missing_field() -> None:
    source = "class A:\n    def __init__(self):\n        self.x = 1\n        self.y: int = 2\n"
    pxd = "cdef class A:\n    cdef public long long x\n    cdef object z, w\n"
    assert declared(pxd) == {"A": {"x", "z", "w"}}
    assert assigned(source, "A") - declared(pxd)["A"] == {"y"}
