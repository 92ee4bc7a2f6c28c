"""ruff's checks (pyproject's [tool.ruff.lint]) hold for the whole tree."""

import subprocess
import sys
from pathlib import Path

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
