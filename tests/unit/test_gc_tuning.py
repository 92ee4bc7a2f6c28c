"""The serving broker's garbage-collector settings (``server.tune_gc``).

Run in a child interpreter: they are process-wide and must not change pytest's own.
"""

import json
import subprocess
import sys

from leveret.node.process import GC_THRESHOLD


def test_tune_gc_raises_the_thresholds_and_freezes_start_up_objects() -> None:
    code = ("import gc, json; from leveret.node.process import tune_gc; "
            "before = gc.get_freeze_count(); tune_gc(); "
            "print(json.dumps([gc.get_threshold(), before, gc.get_freeze_count()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    threshold, frozen_before, frozen_after = json.loads(out)
    assert tuple(threshold) == GC_THRESHOLD
    assert GC_THRESHOLD[0] >= 10_000  # the point: far above CPython's 700
    assert frozen_before == 0 and frozen_after > 1000  # the imported modules at least
