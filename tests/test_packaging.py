"""The wheel installs and imports in a fresh virtualenv, without shadowing PyPI's ``amqp``."""

import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_imports_in_fresh_venv(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(wheels), str(ROOT)], check=True)
    (wheel,) = wheels.glob("leveret-*.whl")
    env_dir = tmp_path / "venv"
    # System site-packages give the venv pamqp/lmdb without a download; leveret itself
    # comes only from the wheel, since the editable install is not visible there.
    venv.create(env_dir, with_pip=True, system_site_packages=True)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True)
    probe = (
        "import leveret, leveret.amqp.server, leveret.exchanges, leveret.queues, "
        "leveret.persistence, leveret.confirms, leveret.spark_sink, leveret.management_ui, "
        "leveret.cli, importlib.util, sys\n"
        "assert 'site-packages' in leveret.__file__, leveret.__file__\n"
        "spec = importlib.util.find_spec('amqp')\n"
        "assert spec is None or 'leveret' not in (spec.origin or ''), spec\n"
        "print(leveret.__version__)\n"
    )
    out = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.stdout.strip() == "0.1.0"
    help_out = subprocess.run([str(env_dir / "bin" / "leveret"), "--version"], check=True,
                              capture_output=True, text=True, cwd=tmp_path)
    assert "0.1.0" in help_out.stdout + help_out.stderr
