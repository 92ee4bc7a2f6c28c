"""Keep PySpark's between-task collection cheap in the Python workers the bridge runs in.

A reused Spark Python worker calls ``gc.collect()`` after every task (``pyspark/daemon.py``),
and a full collection walks every tracked object in the process: PySpark's, pyarrow's and
the imported modules', hundreds of thousands of them. It took about a quarter of the task
workers' CPU in the queue -> Spark -> exchange pipeline (bench/README.md, "Spark bridge").
Everything alive when a task of ours starts has survived that collection, so it is frozen
(``gc.freeze``): later collections walk only what tasks create. What a frozen object
drops is still freed by reference counting; only a cycle among frozen objects that becomes
garbage would stay, and start-up state (modules, pools, schemas) does not.
"""

from __future__ import annotations

import gc

from pyspark import TaskContext


def freeze_survivors() -> None:
    """In a Spark task, leave every object alive now out of later collections (cheap: a
    list splice). Anywhere else (a test, a user's own process calling the publisher) it
    does nothing: the process's objects are not ours to freeze."""
    if TaskContext.get() is not None:
        gc.freeze()
