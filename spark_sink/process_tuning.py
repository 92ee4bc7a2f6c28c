"""What the bridge changes in the Python processes Spark starts for it.

Two costs recur in every batch of a streaming query, in Spark's Python workers (a
task reads a partition or publishes one) and in the process that runs the stream
reader's planning methods (the source's driver side):

* **Collection.** A reused Spark Python worker calls ``gc.collect()`` after every task
  (``pyspark/daemon.py``), and a full collection walks every tracked object in the
  process: PySpark's, pyarrow's and the imported modules', hundreds of thousands of
  them. It took about a quarter of the task workers' CPU in the queue -> Spark ->
  exchange pipeline (the bench journal, ``git show f42cb0b:bench/README.md``, "Spark
  bridge"). Everything alive when a task of
  ours starts has survived that collection, so it is frozen (``gc.freeze``): later
  collections walk only what tasks create. What a frozen object drops is still freed by
  reference counting; only a cycle among frozen objects that becomes garbage would stay,
  and start-up state (modules, pools, schemas) does not.
* **Fresh pages.** A batch moves through these processes as a few large buffers (a
  partition's frames, its pickle, PySpark's copy of it: 25 MB each for 25,000 rows of
  1 KB). glibc serves blocks that large with ``mmap`` and gives them back on ``free``, so
  the next batch's buffers are new pages the kernel must zero: in a profile of the
  pipeline (``perf record -a``), ``clear_page_erms`` was 10% of both cores. Raising
  glibc's mmap threshold to its maximum (32 MB) and its trim threshold keeps those blocks
  in the heap, where the next batch reuses them; the price is that a process keeps its
  peak heap (up to ``TRIM_THRESHOLD`` of free memory) between batches.
"""

from __future__ import annotations

import ctypes
import gc
import platform
import sys

from pyspark import TaskContext

M_TRIM_THRESHOLD = -1  # mallopt parameters (glibc's malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest: blocks up to this come from the heap
TRIM_THRESHOLD = 256 << 20  # free memory at the heap's top kept for the next batch

_heap_tuned = False


def freeze_survivors() -> None:
    """In a Spark task, leave every object alive now out of later collections (cheap: a
    list splice). Anywhere else (a test, a user's own process calling the publisher) it
    does nothing: the process's objects are not ours to freeze."""
    if TaskContext.get() is not None:
        gc.freeze()


def in_spark_python_process() -> bool:
    """True in a Python process Spark started (its daemon, workers and runners all run
    a ``pyspark.*`` module as ``__main__``); False in a user's driver or a test."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name.startswith("pyspark.")


def keep_freed_memory() -> None:
    """In a process Spark started, keep freed batch-sized blocks in the heap (once per
    process). Elsewhere, or without glibc, it does nothing."""
    global _heap_tuned
    if not _heap_tuned and in_spark_python_process():
        _heap_tuned = True
        tune_heap()


def tune_heap() -> bool:
    """Set glibc's mmap and trim thresholds (see the module docstring); False if this
    process's C library is not glibc."""
    if platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def task_started() -> None:
    """What a bridge task does first, in the worker Spark runs it in."""
    freeze_survivors()
    keep_freed_memory()
