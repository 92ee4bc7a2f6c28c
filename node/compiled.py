"""Which build of the hot-path modules runs: compiled by Cython, or their Python source.

The modules in ``COMPILED_MODULES`` are plain Python and the only source of their code;
``setup.py`` compiles each with Cython in pure-Python mode (a ``.pxd`` beside it may add C
types) into an extension module of the same name, which Python's import system then
prefers to the ``.py``. Where compiling was not possible (no C compiler, no Cython, an
editable install) the ``.py`` runs, with the same behaviour. ``LEVERET_NO_EXTENSIONS=1``
forces the ``.py`` at run time even where a compiled module is installed (the package's
``__init__`` calls :func:`honour_env` before anything imports them), so the two builds
can be compared on one installation.

What it buys so far (``bench/icount.py``, instructions per message): these two modules
compiled untyped took the transient path from 100.3k to 96.1k and a relayed row from 259.7k
to 257.5k; after the pure-Python trims that both builds share, 91.7k compiled against
91.7-94.3k pure, and 251.3k against 252.2k. Compiling the connection, codec, assembler,
field-table and property codecs, the consumer ring, the plain store and the broker's publish
as well (annotations as hints, but for the codecs) left the transient path about where it was
(90.1-90.6k at 5,000 messages): Cython keeps a Python class's attribute access, allocation and
calls as they are, and that is where the profile's time goes. So the classes a message
passes through (entry, message, consumer, dispatcher, plain store, queue, channel, its
output, connection) are extension types when compiled: a ``.pxd`` beside each declares its
fields, and the methods on the per-message path are ``cpdef`` with the types their
arguments always have, so those calls and attribute reads are C (92.4k -> 70.4k at 20,000
messages; ``docs/benchmarks.md``). What that changes for their instances, compiled: no
attribute that the ``.pxd`` does not declare, and their classes cannot be patched (a test
subclasses instead); a Python subclass (a stream of a queue) still overrides any method.
The ``.pxd`` files cimport each other's types as ``C<name>``, so each module keeps the
Python names its source imports. The frame buffer is one too: its per-frame step is a
``cpdef`` method with C positions that reads the frame's bytes through a C pointer into the
buffer and copies each payload straight into a ``bytes`` (69.2k -> 61.4k a transient
message at 20,000, pure 95.3k -> 96.1k; a relayed row 230.9k -> 219.0k). A C pointer where
the pure build has the bytearray is the pattern for byte work: the same lines index both.
It pays only where the pure build's lines stay cheap: a frame head read byte by byte cost
the pure build 12k, so where the two builds want different lines, a module tests
``COMPILED`` (``cython.compiled``, a C constant once compiled) and the pure build keeps its
one ``unpack_from``. With the frame generator gone (the connection loops over
``FrameBuffer.next_frame``), heads and payloads read in C, and the consumer ring and the
unacked map extension types as well (they name their element types instead of a
``Generic`` parameter, which Cython refuses for one): 61.2k -> 37.7k a transient message
at 20,000, pure 96-103k before and after. A stream's reader loop, page entry and
``x-stream-offset`` splice, and the stream itself as an extension subclass of the queue,
took a stream delivery from 69.3k to 59.0k and a stream publish from 74.2k to 69.6k
(``--scenario stream``, 3,000 x 1 KB). The store's write path (``persistence/apply``,
``lmdb_writer``, ``records``) and the confirm tracker run once or more for every persistent
message, on the group commit's thread or the loop: compiled, with ``records.pxd`` reading a
record's message as C (with that path's trims, a relayed row 216.1k -> 202.5k;
``docs/benchmarks.md``). Then the batch record (``Enqueue``, ``Remove``), the recorder that
group commit subclasses, the confirm tracker and the store writer became extension types
too, the publish path holding the log and the tracker typed (a relayed row 171.6k -> 133.0k
at 5,000). The store's read-back (``persistence/lmdb_reads``) runs once for every message a
paged queue or a stream reads back: compiled as it is, with the stream's delivery trims it
took a one-reader stream delivery from 44.0k to 28.7k. A publish to a named exchange is
routed by ``exchanges/router.route_message``, compiled with the direct matcher and the
binding set it reads, without the vhost's interpreted frame; with the property list's walk
in C (``model/properties.pxd``) instead of a set lookup that a new ``message-id`` on every
row missed, a relayed row went from 128.8k to 115.5-119.5k (``docs/benchmarks.md``, "The relayed
row's route and property check"). The pure build stays the oracle: ``.ci/test`` runs the
protocol, codec, queue and store tests on both.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Final, Literal

# The modules setup.py compiles (it reads this tuple); each is ``leveret/<path>.py``.
COMPILED_MODULES: Final = (
    "leveret.amqp.frames", "leveret.amqp.fastpath", "leveret.amqp.assembler",
    "leveret.amqp.codec", "leveret.amqp.connection", "leveret.amqp.unacked",
    "leveret.model.field_table", "leveret.model.properties", "leveret.model.message",
    "leveret.queues.consumer_ring", "leveret.queues.consumer", "leveret.queues.entry",
    "leveret.queues.plain_store", "leveret.broker.publishing",
    "leveret.amqp.channel", "leveret.amqp.held_output", "leveret.amqp.publishing",
    "leveret.queues.queue", "leveret.queues.dispatch",
    "leveret.queues.stream_header", "leveret.queues.stream_cache", "leveret.queues.stream_reader",
    "leveret.queues.stream",
    "leveret.persistence.apply", "leveret.persistence.lmdb_writer",
    "leveret.persistence.records", "leveret.persistence.lmdb_reads", "leveret.persistence.batch",
    "leveret.confirms.tracker",
    "leveret.model.dedupe_window", "leveret.model.dedupe", "leveret.broker.dedupe",
    "leveret.exchanges.router", "leveret.exchanges.direct", "leveret.exchanges.binding",
    "leveret.exchanges.delayed", "leveret.broker.delayed",
)
# Modules whose annotations Cython may turn into type checks (``data: bytes`` refuses a
# memoryview): the oracle tests feed these every type their callers pass. Every other
# module compiles with its annotations ignored, so it accepts what its source accepts
# (``frames`` and ``fastpath`` too: their ``.pxd`` give the frame reader and the delivery
# writer C types that their annotations cannot, and Cython wants the two to agree).
# (``properties`` has its ``.pxd`` instead: an ``int`` annotation would be a Python int.)
TYPED_BY_ANNOTATIONS: Final = ("leveret.amqp.assembler", "leveret.model.field_table")
NO_EXTENSIONS_ENV: Final = "LEVERET_NO_EXTENSIONS"
# Beside a module compiled in place (``frames.compiled-from``): the digest of its source then.
STAMP_SUFFIX: Final = ".compiled-from"

Build = Literal["compiled", "pure", "partial"]


def disabled(env: Mapping[str, str] = os.environ) -> bool:
    """Whether ``LEVERET_NO_EXTENSIONS`` asks for pure Python (any value but empty or 0)."""
    return env.get(NO_EXTENSIONS_ENV, "") not in ("", "0")


class PureFinder(importlib.abc.MetaPathFinder):
    """Finds the ``.py`` source of a compiled module, ahead of the path finder that
    would pick the extension module beside it."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED_MODULES or not path:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path:
            source = Path(entry) / leaf
            if source.is_file():
                return importlib.util.spec_from_file_location(fullname, source)
        return None


def source_digest(source: Path) -> str:
    """What a module is compiled from: its ``.py`` and the ``.pxd`` beside it, if any."""
    digest = hashlib.sha256(source.read_bytes())
    pxd = source.with_suffix(".pxd")
    if pxd.is_file():
        digest.update(pxd.read_bytes())
    return digest.hexdigest()


def stamp_of(source: Path) -> Path:
    """Where ``setup.py build_ext --inplace`` writes the digest of the source it compiled."""
    return source.with_name(source.stem + STAMP_SUFFIX)


class StaleGuard(importlib.abc.MetaPathFinder):
    """In a source tree built in place: the ``.py`` of every hot-path module once one of them
    was edited since it was compiled.

    ``setup.py build_ext --inplace`` leaves each extension module beside its source with a
    stamp, the digest of the source (``.py`` and ``.pxd``) it came from. Python would import
    the extension even after the source changed; this finder imports the ``.py`` instead and
    names the edited module in :func:`describe`, so a stale build never hides an edit. It
    does so for all of them at once: the extension types cimport each other's layouts, and a
    compiled module beside the source of an edited one fails to import
    (``KeyError: '__pyx_vtable__'``). Without stamps (an installed wheel, whose extensions and
    sources come from one build) it leaves the choice alone.
    """

    def __init__(self) -> None:
        self.stale: set[str] = set()
        # Per tree: the files' (mtime, size) when last judged, and the verdict; every
        # compiled module's import asks, and hashing the tree each time cost ~2 ms.
        self._judged: dict[Path, tuple[tuple[tuple[int, int], ...], bool]] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED_MODULES or not path:
            return None
        leaf = fullname.rpartition(".")[2] + ".py"
        for entry in path:
            source = Path(entry) / leaf
            if not source.is_file():
                continue
            if not stamp_of(source).is_file():
                return None
            root = Path(entry)
            for _ in range(fullname.count(".") - 1):  # leveret.amqp.frames: <root>/amqp
                root = root.parent
            if self._tree_is_stale(root):
                return importlib.util.spec_from_file_location(fullname, source)
            return None
        return None

    def _tree_is_stale(self, root: Path) -> bool:
        """Whether any stamped hot-path module under ``root`` was edited since compiled
        (hashed again only when a source, ``.pxd`` or stamp changed size or time)."""
        sources = [root / (name.partition(".")[2].replace(".", "/") + ".py")
                   for name in COMPILED_MODULES]
        seen = []
        for source in sources:
            for file in (source, source.with_suffix(".pxd"), stamp_of(source)):
                try:
                    info = file.stat()
                    seen.append((info.st_mtime_ns, info.st_size))
                except OSError:
                    seen.append((-1, -1))
        signature = tuple(seen)
        judged = self._judged.get(root)
        if judged is not None and judged[0] == signature:
            return judged[1]
        stale = False
        for name, source in zip(COMPILED_MODULES, sources):
            stamp = stamp_of(source)
            if source.is_file() and stamp.is_file() \
                    and stamp.read_text().strip() != source_digest(source):
                self.stale.add(name)
                stale = True
        self._judged[root] = (signature, stale)
        return stale


STALE_GUARD: Final = StaleGuard()


def honour_env(env: Mapping[str, str] = os.environ) -> None:
    """Install :class:`PureFinder` when ``LEVERET_NO_EXTENSIONS`` says so, and the
    :class:`StaleGuard` always (each once)."""
    if STALE_GUARD not in sys.meta_path:
        sys.meta_path.insert(0, STALE_GUARD)
    if disabled(env) and not any(isinstance(f, PureFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, PureFinder())


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from an extension module rather than its source."""
    return isinstance(getattr(module.__spec__, "loader", None),
                      importlib.machinery.ExtensionFileLoader)


def build() -> Build:
    """``compiled`` when every hot-path module runs compiled, ``pure`` when none does."""
    count = sum(is_compiled(importlib.import_module(name)) for name in COMPILED_MODULES)
    if count == len(COMPILED_MODULES):
        return "compiled"
    return "pure" if count == 0 else "partial"


def describe() -> str:
    """One phrase for the start-up log: which build runs, and why pure when it is."""
    running = build()
    if running == "compiled":
        return "hot path compiled (" + ", ".join(COMPILED_MODULES) + ")"
    if running == "partial":
        text = "hot path partly compiled (" + ", ".join(
            name for name in COMPILED_MODULES if is_compiled(sys.modules[name])) + ")"
        if STALE_GUARD.stale:
            text += ("; edited since compiled, so run from source: "
                     + ", ".join(sorted(STALE_GUARD.stale))
                     + " (python setup.py build_ext --inplace rebuilds them)")
        return text
    if disabled():
        why = f"{NO_EXTENSIONS_ENV} is set"
    elif STALE_GUARD.stale:
        why = ("edited since compiled: " + ", ".join(sorted(STALE_GUARD.stale))
               + "; python setup.py build_ext --inplace rebuilds them")
    else:
        why = "no compiled modules installed"
    return f"hot path in pure Python ({why})"
