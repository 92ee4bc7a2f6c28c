"""The repository's reader-facing texts cite nothing a reader of the repository cannot see.

A tracker's numbers (an "issue" followed by its number) mean nothing to someone with only
the checkout, so the code, the tests, the README, docs/, the bench tools, the examples and
the labs say what is meant instead.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACKER_NUMBER = re.compile(r"\bissues?[ #-]*\d+", re.IGNORECASE)
READER_TEXTS = ("*.md", "*.py", "*.toml", "**/*.md", "**/*.py", "**/*.sh", "**/*.js",
                "**/*.html", "**/*.css", "examples/**/*", ".ci/*")


def _texts() -> list[Path]:
    found = {p for pattern in READER_TEXTS for p in ROOT.glob(pattern) if p.is_file()}
    skipped = {"results", ".venv", "build", "dist", ".git"}
    return sorted(p for p in found if not skipped & set(p.relative_to(ROOT).parts)
                  and p != Path(__file__).resolve())


def test_reader_texts_cite_no_tracker_numbers() -> None:
    hits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for path in _texts()
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if TRACKER_NUMBER.search(line)]
    assert not hits, "\n".join(hits)


def test_the_texts_are_found() -> None:
    """The globs above still reach the files (a moved folder would make the check vacuous)."""
    names = {p.relative_to(ROOT).as_posix() for p in _texts()}
    assert {"README.md", "docs/README.md", "bench/README.md", "bench/loadgen.py",
            "examples/README.md", "labs/durability/lesson.md", "amqp/channel.py",
            "tests/integration/test_smoke.py", "management_ui/static/pages/inspect.js",
            ".ci/run"} <= names


def test_ci_runs_the_readmes_test_command() -> None:
    """``.ci/run`` runs exactly the README's command for the test suite (a CI that ran
    something else would pass where a contributor following the README fails)."""
    readme = (ROOT / "README.md").read_text()
    command = next(line.strip() for line in readme.splitlines()
                   if line.startswith("    ") and "pip install -e '.[dev]'" in line)
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert ci_lines[-1] == command
