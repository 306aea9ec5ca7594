"""The frame decoder, driven byte by byte and fuzzed."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.net.errors import FrameTooLargeError, ProtocolViolation
from core.net.wire.frames import GROW_FROM, HEADER, Frame, FrameDecoder, Kind, encode_frame

SCRATCH = 1024  # small, so that the large-payload path is exercised by modest frames
MAX_FRAME = 1024 * 1024


def decode(chunks: list[bytes], **kwargs: object) -> list[tuple[Kind, int, bytes, bool]]:
    frames: list[Frame] = []
    decoder = FrameDecoder(MAX_FRAME, frames.append, scratch_bytes=SCRATCH, **kwargs)  # type: ignore[arg-type]
    for chunk in chunks:
        decoder.feed(chunk)
    return [(f.kind, f.call_id, bytes(f.payload), f.direct) for f in frames]


frame_strategy = st.tuples(
    st.sampled_from(list(Kind)),
    st.integers(0, 2**32 - 1),
    st.one_of(st.binary(max_size=64), st.binary(min_size=SCRATCH, max_size=4 * SCRATCH)),
)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for point in [*points, len(data)]:
        pieces.append(data[last:point])
        last = point
    return pieces


@settings(max_examples=300, deadline=None)
@given(st.lists(frame_strategy, max_size=12), st.lists(st.integers(0, 10**6), max_size=20))
def test_any_frames_split_anywhere_decode_to_themselves(
    frames: list[tuple[Kind, int, bytes]], cuts: list[int]
) -> None:
    wire = b"".join(encode_frame(kind, call_id, payload) for kind, call_id, payload in frames)
    decoded = decode(split(wire, cuts))
    assert [(k, c, p) for k, c, p, _ in decoded] == frames


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=4096), st.lists(st.integers(0, 5000), max_size=10))
def test_garbage_only_ever_raises_protocol_violations(data: bytes, cuts: list[int]) -> None:
    allocated: list[int] = []

    def allocate(kind: Kind, call_id: int, length: int) -> memoryview | None:
        allocated.append(length)
        return None

    with contextlib.suppress(ProtocolViolation):
        decode(split(data, cuts), allocate=allocate)
    assert all(n <= MAX_FRAME for n in allocated)


def test_oversized_frame_is_refused_before_allocating() -> None:
    allocated: list[int] = []

    def allocate(kind: Kind, call_id: int, length: int) -> memoryview | None:
        allocated.append(length)
        return None

    with pytest.raises(FrameTooLargeError, match="exceeds the limit"):
        decode([HEADER.pack(MAX_FRAME + 1, Kind.DATA, 1)], allocate=allocate)
    assert allocated == []


def test_unknown_kind() -> None:
    with pytest.raises(ProtocolViolation, match="unknown frame kind 99"):
        decode([HEADER.pack(0, 99, 1)])


def test_large_payloads_land_in_the_allocated_buffer() -> None:
    destination = bytearray(3000)
    payload = bytes(range(256)) * 11 + b"xyz"  # 2819 bytes, more than the scratch buffer

    def allocate(kind: Kind, call_id: int, length: int) -> memoryview | None:
        assert (kind, call_id) == (Kind.DATA, 7)
        return memoryview(destination)[:length]

    wire = encode_frame(Kind.DATA, 7, payload) + encode_frame(Kind.END, 7)
    decoded = decode([wire[i : i + 100] for i in range(0, len(wire), 100)], allocate=allocate)
    assert decoded == [(Kind.DATA, 7, payload, True), (Kind.END, 7, b"", False)]
    assert destination[: len(payload)] == payload


def test_frames_are_delivered_before_the_next_header_is_read() -> None:
    order: list[str] = []

    def on_frame(frame: Frame) -> None:
        order.append(f"frame {frame.kind.name}")

    def allocate(kind: Kind, call_id: int, length: int) -> memoryview | None:
        order.append(f"allocate {kind.name}")
        return None

    decoder = FrameDecoder(MAX_FRAME, on_frame, scratch_bytes=SCRATCH, allocate=allocate)
    decoder.feed(encode_frame(Kind.MSG, 1, b"a") + encode_frame(Kind.DATA, 1, b"b" * 2 * SCRATCH))
    assert order == ["frame MSG", "allocate DATA", "frame DATA"]


def test_an_announced_payload_costs_only_what_arrived() -> None:
    """A header announcing the largest frame, then one byte, must not pin the whole frame."""
    limit = 8 * 1024 * 1024
    frames: list[Frame] = []
    decoder = FrameDecoder(limit, frames.append)
    decoder.feed(HEADER.pack(limit, Kind.MSG, 1) + b"x")
    assert decoder.held_bytes <= 64 * 1024 + GROW_FROM
    decoder.feed(b"y" * (3 * GROW_FROM))  # the buffer grows with what is sent, at most doubling
    assert decoder.held_bytes <= 64 * 1024 + 2 * (3 * GROW_FROM + 1)
    assert frames == []


def test_a_grown_payload_is_whole_and_exact() -> None:
    payload = bytes(range(256)) * (5 * GROW_FROM // 256) + b"tail"
    wire = encode_frame(Kind.RESULT, 3, payload) + encode_frame(Kind.END, 3)
    for piece in (7, 4096, 200_000):
        decoded = decode([wire[i : i + piece] for i in range(0, len(wire), piece)])
        assert decoded == [(Kind.RESULT, 3, payload, False), (Kind.END, 3, b"", False)]


def test_a_grown_payload_is_whole_when_the_reader_keeps_every_buffer_it_was_given() -> None:
    """A transport may still hold its last read target when it asks for the next one: the buffer
    then cannot grow in place, and a larger one takes what arrived."""
    payload = bytes(range(256)) * (5 * GROW_FROM // 256) + b"tail"
    frames: list[Frame] = []
    decoder = FrameDecoder(MAX_FRAME, frames.append)
    wire = memoryview(encode_frame(Kind.RESULT, 3, payload) + encode_frame(Kind.END, 3))
    targets = []
    while wire:
        targets.append(decoder.get_buffer())
        n = min(len(targets[-1]), len(wire), 4096)
        targets[-1][:n] = wire[:n]
        wire = wire[n:]
        decoder.buffer_updated(n)
    assert [(f.kind, bytes(f.payload)) for f in frames] == [(Kind.RESULT, payload), (Kind.END, b"")]


def test_a_decoder_that_never_reads_holds_no_buffer() -> None:
    assert FrameDecoder(MAX_FRAME, lambda frame: None).held_bytes == 0
