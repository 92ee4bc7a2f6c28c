"""The teaching labs (``leveret lab``): listed, documented, and each run as a user would.

Every lab runs with ``--fast`` as a subprocess, starting and killing its own
broker; it must exit 0 (the broker behaved as the lesson predicts), print its
timeline and its table of counts.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from leveret.labs import LABS

ROOT = Path(__file__).resolve().parent.parent
# A hang guard, not a budget: a lab ends when its story is told (about 5-15 s idle with
# --fast); how long that takes on a busy machine is not the lab's to assert.
LAB_TIMEOUT_S = 600.0
SECTIONS = ("## The question", "## Predict", "## Watch", "## What happened and why",
            "## Read more")


def _leveret(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "leveret", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT.parent)


def test_list_prints_one_lab_per_line_and_nothing_else() -> None:
    out = _leveret("lab", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split("\t")[0] for line in lines] == [lab.name for lab in LABS]
    assert all(len(line.split("\t")) == 2 and line.split("\t")[1] for line in lines)
    assert "leveret lab run NAME" in out.stderr  # how to run one, beside the list


def test_unknown_lab_is_a_usage_error() -> None:
    out = _leveret("lab", "run", "no-such-lab")
    assert out.returncode == 2 and "no lab 'no-such-lab'" in out.stderr


@pytest.mark.parametrize("name", [lab.name for lab in LABS])
def test_each_lab_has_a_lesson_and_a_plain_pika_example(name: str) -> None:
    folder = ROOT / "labs" / name
    lesson = (folder / "lesson.md").read_text()
    for section in SECTIONS:
        assert section in lesson, f"{name}/lesson.md lacks {section!r}"
    assert "https://www.rabbitmq.com/docs/" in lesson
    example = (folder / "example.py").read_text()
    assert "import pika" in example and "leveret" not in example.split('"""')[-1]


@pytest.mark.parametrize("name", [lab.name for lab in LABS])
def test_lab_runs_fast_and_behaves_as_the_lesson_predicts(name: str) -> None:
    out = _leveret("lab", "run", name, "--fast", timeout=LAB_TIMEOUT_S)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    text = out.stdout
    assert "\ntimeline\n" in text and re.search(r"\d+\.\d{3}s  start ", text)
    header = re.search(r"^  case +sent +confirmed +processed +survived +lost +duplicated$",
                       text, re.M)
    assert header, text
    rows = text[header.end():].split("\n\n")[0].strip().splitlines()
    assert rows, "the table of counts is empty"
    assert "FAIL" not in text and "result: as the lesson predicts" in text
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    if name == "acks":  # every message counted is named: "gets the 7 not acked: 4, ..., 10"
        got = re.search(r"gets the (\d+) not acked: ([\d, ]+);", text)
        assert got and int(got[1]) == len(got[2].split(", ")), text
    if name == "poison":  # no row of dashes standing for a header that is not there
        assert "x-delivery-count: -" not in text
