"""ruff's checks (pyproject's [tool.ruff.lint]) hold for the whole tree."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed")
def test_ruff_is_clean():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise",
                             str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
