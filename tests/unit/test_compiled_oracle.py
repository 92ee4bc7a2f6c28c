"""The pure modules are the oracle of the compiled ones: same bytes in, same result out.

Each hot-path module compiled by Cython (``node/compiled.py`` lists them) is fed the same
input as its Python source, here both loaded side by side (``compiled_build.py``): valid
and mutated frame streams from the protocol fuzz tests, whole and in chunks, and every
mangled payload of ``test_fastpath.py``. Results must be equal byte for byte, and where the
pure module raises, the compiled one must raise the same exception with the same text
(py-amqp's compiled codec once skipped its frame checks for speed; this catches that).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from leveret.node import compiled
from leveret.tests.unit import compiled_build
from leveret.tests.unit.test_fastpath import (
    bodies,
    channels,
    exchange_names,
    frame_maxes,
    mangled_payloads,
    shortstrs,
)
from leveret.tests.unit.test_protocol_fuzz import SCRIPT, mutated_scripts

# The first test may build the compiled modules (minutes on a busy machine): a cap, not a budget.
pytestmark = pytest.mark.timeout(900)
SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def frames() -> tuple[ModuleType, ModuleType]:
    return (compiled_build.pure("leveret.amqp.frames"),
            compiled_build.compiled_module("leveret.amqp.frames"))


@pytest.fixture(scope="module")
def fastpath() -> tuple[ModuleType, ModuleType]:
    return (compiled_build.pure("leveret.amqp.fastpath"),
            compiled_build.compiled_module("leveret.amqp.fastpath"))


def outcome(function: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """What a call gives: its value, or its exception's type, text and arguments."""
    try:
        return "value", function(*args)
    except Exception as exc:  # compared, not handled
        return "raised", (type(exc).__name__, str(exc), exc.args)


def _frames_of(module: ModuleType, chunks: list[bytes], frame_max: int,
               tune_after: int | None = None, closing: bool = False) -> list[Any]:
    """Everything a FrameBuffer yields for ``chunks``, the publish's content with each
    FRAME_PUBLISH item, what it raised, and what it kept buffered."""
    buf = module.FrameBuffer(frame_max)
    seen: list[Any] = []
    for chunk in chunks:
        feed = buf.feed_closing(chunk) if closing else buf.feed(chunk)
        try:
            for item in feed:
                seen.append(item)
                if item[0] == module.FRAME_PUBLISH:
                    seen.append(buf.content)
                if tune_after is not None and len(seen) == tune_after:
                    buf.frame_max = 4096  # connection.tune-ok bounds the very next frame
        except Exception as exc:
            seen.append(("raised", type(exc).__name__, str(exc), exc.args))
            break
    seen.append(("left", len(buf)))
    return seen


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def test_the_compiled_modules_are_extension_modules(frames: tuple[ModuleType, ModuleType],
                                                    fastpath: tuple[ModuleType, ModuleType]
                                                    ) -> None:
    for py, c in (frames, fastpath):
        assert not compiled.is_compiled(py) and compiled.is_compiled(c)


def test_the_valid_session_frames_alike(frames: tuple[ModuleType, ModuleType]) -> None:
    py, c = frames
    data = b"".join(SCRIPT)
    whole = _frames_of(py, [data], 131072)
    assert len(whole) > len(SCRIPT) // 3  # publishes come as one item
    assert _frames_of(c, [data], 131072) == whole
    bytewise = [data[i:i + 1] for i in range(len(data))]
    assert _frames_of(c, bytewise, 131072) == _frames_of(py, bytewise, 131072)


@SETTINGS
@given(script=mutated_scripts(), cuts=st.lists(st.integers(0, 20000), max_size=5),
       frame_max=st.sampled_from([0, 4096, 8192, 131072]), tune_after=st.none() | st.integers(1, 8),
       closing=st.booleans())
def test_mutated_streams_frame_alike(frames: tuple[ModuleType, ModuleType], script: list[bytes],
                                     cuts: list[int], frame_max: int, tune_after: int | None,
                                     closing: bool) -> None:
    py, c = frames
    chunks = _cut(b"".join(script), cuts)
    assert (_frames_of(c, chunks, frame_max, tune_after, closing)
            == _frames_of(py, chunks, frame_max, tune_after, closing))


@SETTINGS
@given(data=st.binary(max_size=600), cuts=st.lists(st.integers(0, 600), max_size=6),
       closing=st.booleans())
@example(data=b"\x01\x00\x01\x00\x00\x00\x00\xcd", cuts=[], closing=False)  # bad frame end
@example(data=b"\x07\x00\x00\x00\x00\x00\x00\xce", cuts=[], closing=False)  # unknown type
@example(data=b"\x01\x00\x00\xff\xff\xff\xff", cuts=[], closing=True)  # too large
def test_random_bytes_frame_alike(frames: tuple[ModuleType, ModuleType], data: bytes,
                                  cuts: list[int], closing: bool) -> None:
    py, c = frames
    chunks = _cut(data, cuts)
    assert (_frames_of(c, chunks, 8192, closing=closing)
            == _frames_of(py, chunks, 8192, closing=closing))


_DECODERS = ["decode_publish", "decode_ack", "decode_nack", "decode_reject",
             "decode_content_header"]


@settings(max_examples=1000, deadline=None)
@given(mangled_payloads(), st.booleans())
@example(b"", False)
@example(b"\x00\x3c\x00\x28\x00\x00\x05ab", False)
@example(b"\x00\x3c\x00\x28\x00\x00\x00\x05", True)
@example(b"\x00\x3c\x00\x28\x00\x00\x02\xff\xfe\x00\x00", False)  # invalid UTF-8
def test_decoders_decode_alike(fastpath: tuple[ModuleType, ModuleType], data: bytes,
                               as_view: bool) -> None:
    py, c = fastpath
    for name in _DECODERS:
        theirs = outcome(getattr(py, name), memoryview(data) if as_view else data)
        ours = outcome(getattr(c, name), memoryview(data) if as_view else data)
        assert ours == theirs, name


# Values past every field's range, so both builds must refuse them alike.
_tags = st.integers(0, 2**63 - 1) | st.sampled_from([-1, 2**64 - 1, 2**64])
_channels = channels | st.sampled_from([-1, 0x10000])
_texts = shortstrs | st.just("x" * 256) | st.just("é" * 128)


@SETTINGS
@given(_channels, _texts, _tags, st.booleans(), exchange_names, _texts,
       st.integers(0, 2**32 - 1) | st.just(2**32), bodies, frame_maxes | st.just(8),
       st.binary(max_size=40))
def test_encoders_encode_alike(fastpath: tuple[ModuleType, ModuleType], channel: int, ctag: str,
                               tag: int, flag: bool, exchange: str, rkey: str, count: int,
                               body: bytes, frame_max: int, props: bytes) -> None:
    py, c = fastpath
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("encode_deliver", (channel, ctag, tag, flag, exchange, rkey)),
        ("encode_get_ok", (channel, tag, flag, exchange, rkey, count)),
        ("encode_return", (channel, count & 0xFFFF, ctag, exchange, rkey)),
        ("encode_ack", (channel, tag, flag)),
        ("encode_nack", (channel, tag, flag, not flag)),
        ("encode_content", (channel, props, body, frame_max)),
        ("encode_deliver_with_content",
         (channel, ctag, tag, flag, exchange, rkey, props, body, frame_max)),
    ]
    for name, args in calls:
        theirs = outcome(getattr(py, name), *args)
        ours = outcome(getattr(c, name), *args)
        assert ours == theirs, name
