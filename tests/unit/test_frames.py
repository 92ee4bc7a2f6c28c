"""FrameBuffer: the same frames however the stream is cut; framing errors are 501."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.amqp.frames import (
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_PUBLISH,
    INITIAL_FRAME_MAX,
    NO_FRAME,
    FrameBuffer,
)
from leveret.model.errors import FRAME_ERROR, ConnectionError_
from leveret.tests.unit import compiled_build


def raw_frame(ftype: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + bytes((end,))


SAMPLE = [
    (FRAME_METHOD, 0, b"\x00\x0a\x00\x0b" + b"x" * 20),
    (FRAME_HEADER, 1, b"\x00\x3c\x00\x00" + b"\x00" * 8 + b"\x00\x00"),
    (FRAME_BODY, 1, b"hello"),
    (FRAME_BODY, 65535, b""),
    (FRAME_HEARTBEAT, 0, b""),
]
STREAM = b"".join(raw_frame(*f) for f in SAMPLE)


def feed_all(fb: FrameBuffer, data: bytes) -> list[tuple[int, int, bytes]]:
    return list(fb.feed(data))


def feed_bytewise(fb: FrameBuffer, data: bytes) -> list[tuple[int, int, bytes]]:
    frames = []
    for i in range(len(data)):
        frames += fb.feed(data[i : i + 1])
    return frames


def test_whole_and_byte_by_byte_agree() -> None:
    whole = feed_all(FrameBuffer(), STREAM)
    assert whole == SAMPLE
    assert feed_bytewise(FrameBuffer(), STREAM) == SAMPLE


def test_partial_frame_is_kept_until_complete() -> None:
    fb = FrameBuffer()
    first = raw_frame(*SAMPLE[0])
    assert feed_all(fb, first[:-1]) == []
    assert len(fb) == len(first) - 1
    assert feed_all(fb, first[-1:] + b"\x01") == [SAMPLE[0]]
    assert len(fb) == 1  # the start of the next frame stays buffered


@settings(max_examples=60, deadline=None)
@given(
    frames=st.lists(
        st.tuples(st.sampled_from([FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT]),
                  st.integers(0, 0xFFFF), st.binary(max_size=64)),
        max_size=8,
    ),
    cuts=st.lists(st.integers(0, 2000), max_size=10),
)
def test_any_cut_gives_the_same_frames(frames: list[tuple[int, int, bytes]],
                                       cuts: list[int]) -> None:
    data = b"".join(raw_frame(*f) for f in frames)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    fb = FrameBuffer()
    got = []
    for a, b in itertools.pairwise(points):
        got += fb.feed(data[a:b])
    assert got == frames
    assert len(fb) == 0


def _error(fb: FrameBuffer, data: bytes, bytewise: bool) -> tuple[list, ConnectionError_]:
    got: list = []
    with pytest.raises(ConnectionError_) as info:
        if bytewise:
            for i in range(len(data)):
                for f in fb.feed(data[i : i + 1]):
                    got.append(f)
        else:
            for f in fb.feed(data):
                got.append(f)
    return got, info.value


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "byte-by-byte"])
def test_bad_end_octet_is_frame_error(bytewise: bool) -> None:
    good = raw_frame(FRAME_BODY, 1, b"ok")
    got, exc = _error(FrameBuffer(), good + raw_frame(FRAME_BODY, 1, b"abc", end=0x00), bytewise)
    assert exc.code == FRAME_ERROR == 501
    assert exc.reply_text.endswith("{invalid_frame_end_marker,0}")
    # The frame before the bad one is still handed over, however the stream was cut.
    assert got == [(FRAME_BODY, 1, b"ok")]


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "byte-by-byte"])
def test_unknown_frame_type_is_frame_error(bytewise: bool) -> None:
    good = raw_frame(FRAME_HEARTBEAT, 0, b"")
    got, exc = _error(FrameBuffer(), good + raw_frame(9, 0, b"zz"), bytewise)
    assert exc.code == FRAME_ERROR
    # RabbitMQ's text, which needs the whole frame: the same however the stream was cut.
    assert exc.reply_text == 'FRAME_ERROR - type 9, all octets = <<"zz">>: unknown_frame'
    assert got == [(FRAME_HEARTBEAT, 0, b"")]


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "byte-by-byte"])
def test_oversized_frame_is_frame_error_before_its_payload_arrives(bytewise: bool) -> None:
    fb = FrameBuffer()
    head = struct.pack(">BHI", FRAME_BODY, 1, INITIAL_FRAME_MAX)  # 8 bytes too many
    got, exc = _error(fb, head, bytewise)
    assert exc.code == FRAME_ERROR
    assert "frame_too_large" in exc.reply_text
    assert got == []


def test_frame_exactly_at_frame_max_is_accepted() -> None:
    fb = FrameBuffer(frame_max=4096)
    payload = b"x" * (4096 - 8)
    assert feed_all(fb, raw_frame(FRAME_BODY, 1, payload)) == [(FRAME_BODY, 1, payload)]
    with pytest.raises(ConnectionError_):
        feed_all(fb, raw_frame(FRAME_BODY, 1, payload + b"x"))


def test_frame_max_change_applies_to_the_next_frame_in_the_same_chunk() -> None:
    """The consumer may raise frame_max after one frame (tune-ok); the next frame sees it."""
    fb = FrameBuffer()
    big = b"y" * (INITIAL_FRAME_MAX * 2)
    got = []
    for f in fb.feed(raw_frame(FRAME_METHOD, 0, b"tune") + raw_frame(FRAME_BODY, 1, big)):
        got.append(f)
        fb.frame_max = 131072
    assert got == [(FRAME_METHOD, 0, b"tune"), (FRAME_BODY, 1, big)]


def test_take_returns_the_buffered_prefix() -> None:
    fb = FrameBuffer()
    assert feed_all(fb, b"AMQP") == []
    assert fb.take(4) == b"AMQP"
    assert len(fb) == 0


# -- a publish with its content, fused (FRAME_PUBLISH) ------------------------------------

PUBLISH = b"\x00\x3c\x00\x28\x00\x00\x00\x01q\x00"  # basic.publish to "" with key "q"


def content_header(body_size: int, class_id: int = 60) -> bytes:
    return struct.pack(">HHQ", class_id, 0, body_size) + b"\x10\x00\x02"  # delivery_mode 2


def expanded(fb: FrameBuffer, item: tuple[int, int, bytes]) -> list[tuple[int, int, bytes]]:
    """The frames ``item`` (just yielded by ``fb.feed``) stands for: three for FRAME_PUBLISH."""
    ftype, channel, payload = item
    if ftype != FRAME_PUBLISH:
        return [item]
    header, body = fb.content
    return [(FRAME_METHOD, channel, payload), (FRAME_HEADER, channel, header),
            (FRAME_BODY, channel, body)]


def feed_collect(fb: FrameBuffer, chunks: list[bytes]) -> tuple[list, list, str | None]:
    """Items fed chunk by chunk until the end or a framing error (its text): their types,
    the frames they stand for, the error."""
    types: list[int] = []
    got: list = []
    try:
        for chunk in chunks:
            for item in fb.feed(chunk):
                types.append(item[0])
                got += expanded(fb, item)
    except ConnectionError_ as exc:
        return types, got, exc.reply_text
    return types, got, None


def test_a_whole_publish_is_one_item() -> None:
    frames = [(FRAME_METHOD, 1, PUBLISH), (FRAME_HEADER, 1, content_header(5)),
              (FRAME_BODY, 1, b"hello")]
    types, got, error = feed_collect(FrameBuffer(), [b"".join(raw_frame(*f) for f in frames) * 2])
    assert types == [FRAME_PUBLISH] * 2 and got == frames * 2 and error is None
    # Cut anywhere inside, the same publish comes frame by frame.
    assert feed_bytewise(FrameBuffer(), b"".join(raw_frame(*f) for f in frames)) == frames


@pytest.mark.parametrize("frames", [
    pytest.param([(FRAME_METHOD, 1, PUBLISH), (FRAME_HEADER, 1, content_header(0))],
                 id="empty-body"),
    pytest.param([(FRAME_METHOD, 1, PUBLISH), (FRAME_HEADER, 1, content_header(4)),
                  (FRAME_BODY, 1, b"ab"), (FRAME_BODY, 1, b"cd")], id="two-body-frames"),
    pytest.param([(FRAME_METHOD, 1, PUBLISH), (FRAME_HEADER, 2, content_header(2)),
                  (FRAME_BODY, 2, b"ab")], id="other-channel"),
    pytest.param([(FRAME_METHOD, 1, PUBLISH), (FRAME_HEADER, 1, content_header(3)),
                  (FRAME_BODY, 1, b"ab")], id="short-body"),
    pytest.param([(FRAME_METHOD, 1, PUBLISH), (FRAME_BODY, 1, b"ab")], id="no-header"),
    pytest.param([(FRAME_METHOD, 1, PUBLISH), (FRAME_HEADER, 1, b"\x00\x3c"),
                  (FRAME_BODY, 1, b"ab")], id="short-header"),
])
def test_anything_but_a_publish_with_one_body_frame_comes_frame_by_frame(frames: list) -> None:
    assert feed_all(FrameBuffer(), b"".join(raw_frame(*f) for f in frames)) == frames


@pytest.mark.parametrize("bad", ["end-octet", "frame-max"])
def test_a_bad_content_frame_after_a_publish_fails_as_frame_by_frame(bad: str) -> None:
    body = raw_frame(FRAME_BODY, 1, b"x" * 100, end=0x00 if bad == "end-octet" else 0xCE)
    data = (raw_frame(FRAME_METHOD, 1, PUBLISH) + raw_frame(FRAME_HEADER, 1, content_header(100))
            + body)
    limit = 100 if bad == "frame-max" else 4096  # the method and the header fit, the body not
    whole = feed_collect(FrameBuffer(frame_max=limit), [data])
    bytewise = feed_collect(FrameBuffer(frame_max=limit), [data[i:i + 1] for i in range(len(data))])
    assert whole == bytewise
    assert whole[0] == [FRAME_METHOD, FRAME_HEADER] and whole[2] is not None


_ANY_FRAME = st.tuples(st.sampled_from([FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT]),
                       st.integers(0, 3), st.binary(max_size=24))


@st.composite
def publishes(draw: st.DrawFn) -> list[tuple[int, int, bytes]]:
    """A publish with its content, often well formed, sometimes bent."""
    channel = draw(st.integers(1, 2))
    body = draw(st.binary(max_size=40))
    announced = draw(st.sampled_from([len(body), len(body), len(body) + 1, 0]))
    frames = [(FRAME_METHOD, channel, PUBLISH),
              (FRAME_HEADER, draw(st.sampled_from([channel, channel, 3])),
               content_header(announced, draw(st.sampled_from([60, 60, 50]))))]
    if draw(st.booleans()) or announced:
        frames.append((FRAME_BODY, draw(st.sampled_from([channel, channel, 0])), body))
    return frames


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(st.one_of(publishes(), st.lists(_ANY_FRAME, max_size=2)), max_size=6),
       cuts=st.lists(st.integers(0, 2000), max_size=8), frame_max=st.sampled_from([0, 40, 4096]))
def test_publishes_amid_other_frames_give_the_same_frames_however_cut(
        parts: list, cuts: list[int], frame_max: int) -> None:
    frames = [f for part in parts for f in part]
    data = b"".join(raw_frame(*f) for f in frames)
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    _, got, error = feed_collect(FrameBuffer(frame_max=frame_max),
                                 [data[a:b] for a, b in itertools.pairwise(points)])
    _, bytewise, bytewise_error = feed_collect(FrameBuffer(frame_max=frame_max),
                                               [data[i:i + 1] for i in range(len(data))])
    assert got == bytewise and error == bytewise_error
    if error is None:
        assert bytewise == frames


# -- the connection's loop: append, next_frame, compact ------------------------------------

def test_next_frame_leaves_the_frame_on_the_buffer_and_compact_drops_what_was_read() -> None:
    """The steps ``feed`` is made of, as the connection calls them: the type is returned,
    channel and payloads stay on the buffer, an incomplete frame waits for more bytes."""
    publish = b"".join(raw_frame(*f) for f in [(FRAME_METHOD, 7, PUBLISH),
                                               (FRAME_HEADER, 7, content_header(5)),
                                               (FRAME_BODY, 7, b"hello")])
    big = raw_frame(FRAME_BODY, 65535, b"b" * 300)
    fb = FrameBuffer()
    fb.append(publish + big + raw_frame(FRAME_HEARTBEAT, 0, b"")[:5])
    assert fb.next_frame() == FRAME_PUBLISH
    assert (fb.channel, fb.payload, fb.header, fb.body) == (7, PUBLISH, content_header(5),
                                                            b"hello")
    assert fb.next_frame() == FRAME_BODY
    assert (fb.channel, fb.payload) == (65535, b"b" * 300)  # a channel and size above 255
    assert fb.next_frame() == NO_FRAME  # five bytes of a heartbeat: not yet
    fb.compact()
    assert len(fb) == 5
    fb.append(raw_frame(FRAME_HEARTBEAT, 0, b"")[5:])
    assert fb.next_frame() == FRAME_HEARTBEAT and fb.payload == b""
    fb.compact()
    assert len(fb) == 0 and fb.next_frame() == NO_FRAME


def test_a_size_with_its_top_bit_set_reads_as_unsigned() -> None:
    head = b"\x03\x00\x01\x80\x00\x00\x01"  # a body frame of 2**31 + 1 bytes announced
    unlimited = FrameBuffer(frame_max=0)
    unlimited.append(head)
    assert unlimited.next_frame() == NO_FRAME  # waits for the rest, however far
    bounded = FrameBuffer(frame_max=131072)
    bounded.append(head)
    with pytest.raises(ConnectionError_) as info:
        bounded.next_frame()
    assert "{frame_too_large,2147483649,131064}" in info.value.reply_text


@given(st.binary(min_size=7, max_size=24), st.data())
def test_the_head_reader_reads_what_struct_reads(data: bytes, draw: st.DataObject) -> None:
    """``_read_head``'s lines are the compiled reader's (an inline C function there, not
    reachable from Python): run from the ``.py``, they read every head as ``>BHI`` does."""
    at = draw.draw(st.integers(0, len(data) - 7))
    pure = compiled_build.pure("leveret.amqp.frames")
    assert pure._read_head(data, at) == struct.unpack_from(">BHI", data, at)
