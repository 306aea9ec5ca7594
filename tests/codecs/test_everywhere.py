"""A codec added to the table (and nowhere else) is found everywhere a codec is named, costed,
encoded or carried: the manifest, the peer's averaging settings, the engine's estimate, averaging
itself and the expert call's wire. Each place that kept a list of its own would fail here."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from core.averaging import Averager
from core.codecs import CODECS, using_codecs
from core.codecs.chunks import decode, encode, encoded_size, max_abs_error
from core.dht import DHTConfig, DHTNode, HostTransport
from core.engine.join.resource_use import resource_use
from core.project import ManifestError, parse_manifest
from tests.averaging.conftest import NET, PATIENT
from tests.codecs.float24 import FLOAT24
from tests.codecs.thin import THIN
from tests.conftest import MakeHost
from tests.support.leaks import HANG_GUARD

DEMO = Path(__file__).resolve().parents[2] / "resources" / "demo" / "project.toml"
TABLE = CODECS.with_codec(FLOAT24)


def demo_text(codec: str) -> str:
    text = DEMO.read_text()
    assert text.count('codec = "fp16"') == 1
    return text.replace('codec = "fp16"', f'codec = "{codec}"')


def test_a_sparse_codec_added_to_the_table_takes_the_manifests_settings() -> None:
    """The manifest's ``density`` and ``bits`` belong to whichever codec takes settings, and the
    bits it takes are the codec's to say: nothing compares a codec's name to decide."""
    text = demo_text("thin").replace('codec = "thin"', 'codec = "thin"\ndensity = 0.03\nbits = 8')
    with pytest.raises(ManifestError, match=r"averaging\.codec: must be one of"):
        parse_manifest(text)
    with using_codecs(CODECS.with_codec(THIN)):
        manifest = parse_manifest(text)
        assert manifest.averaging.sparse
        codec = manifest.averaging.round_codec()
        assert (codec.name, codec.sparse) == ("topk-0.03-8bit", True)
        with pytest.raises(ManifestError, match=r"averaging\.bits: must be one of 4, 8, got 2"):
            manifest.with_averaging(bits=2)
        assert manifest.with_averaging(codec="topk", bits=2).averaging.bits == 2
        with pytest.raises(ManifestError, match=r"applies to 'topk' or 'thin' only"):
            manifest.with_averaging(codec="fp16")
        assert not manifest.with_averaging(codec="fp16", density=0.01, bits=2).averaging.sparse


def test_the_built_in_table_does_not_know_the_new_codec() -> None:
    """Without the wider table in force the same manifest is refused: what the next test finds
    comes from the table, not from somewhere the name was already known."""
    with pytest.raises(ManifestError, match=r"averaging\.codec: must be one of"):
        parse_manifest(demo_text("float24"))


async def test_a_codec_added_to_the_table_is_found_everywhere(make_host: MakeHost) -> None:
    torch = pytest.importorskip("torch")  # the peer's settings and the MoE wire are torch code
    from core.moe.protocol import (
        DTYPE,
        ExpertInfo,
        ExpertRequest,
        ReplyHeader,
        expected_shapes,
        recv_tensors,
        send_tensors,
        validate_reply,
        validate_request,
    )
    from core.training.peer.recipe import averager_config

    with using_codecs(TABLE):
        # the manifest accepts its name, and names it among the choices when refusing another
        manifest = parse_manifest(demo_text("float24"))
        assert manifest.averaging.codec == "float24"
        with pytest.raises(ManifestError, match="'topk', 'float24'; got 'zip'"):
            manifest.with_averaging(codec="zip")

        # the peer averages with it
        assert averager_config(manifest, "trainer").codec is FLOAT24

        # the engine costs it: three bytes a value, 1.5 times what fp16's two cost
        ours = resource_use(manifest, "cpu", "here").network_bytes_per_hour
        halves = resource_use(manifest.with_averaging(codec="fp16"), "cpu", "here")
        assert ours == pytest.approx(1.5 * halves.network_bytes_per_hour, rel=1e-6)

        # the expert call's wire takes it for activations, both ways, and carries tensors with it
        info = ExpertInfo("ffn.0.1", DTYPE, [[8]], [[8]], max_batch=4)
        shapes = expected_shapes(info, "forward", 2)
        request = ExpertRequest(info.uid, 2, DTYPE, FLOAT24.wire_id, shapes)
        assert validate_request(info, "forward", request) is FLOAT24
        assert validate_reply(ReplyHeader(FLOAT24.wire_id, shapes), 2, shapes) is FLOAT24
        sent = torch.linspace(-3.0, 5.0, 16).reshape(2, 8)
        pipe = Pipe()
        await send_tensors(pipe, FLOAT24, [sent])
        assert len(pipe.data) == 3 * 16
        (received,) = await recv_tensors(pipe, FLOAT24, shapes)
        assert float((received - sent).abs().max()) <= max_abs_error(FLOAT24, sent.numpy().ravel())

    # averaging encodes with it (no table needed: the spec carries its kernel) ...
    values = np.random.default_rng(0).standard_normal(10_001).astype(np.float32)
    data = encode(FLOAT24, values)
    assert len(data) == encoded_size(FLOAT24, values.size) == 3 * values.size
    restored = decode(FLOAT24, data, values.size)
    assert 0 < float(np.max(np.abs(restored - values))) <= max_abs_error(FLOAT24, values)

    # ... and a whole round averages with it: every member ends with the same values, within
    # the codec's error of the exact mean (an input on its way in, the mean on its way back)
    averagers = await averagers_of(make_host, 2)
    try:
        tensors = [
            np.random.default_rng(seed).standard_normal(70_000).astype(np.float32)
            for seed in (1, 2)
        ]
        inputs = [t.copy() for t in tensors]
        expected = (inputs[0] + inputs[1]) / 2
        results = await asyncio.gather(
            *(
                a.average([t], round_key="float24", timeout=HANG_GUARD)
                for a, t in zip(averagers, tensors, strict=True)
            )
        )
        assert all(r.complete for r in results), [r.summary() for r in results]
        np.testing.assert_array_equal(tensors[0], tensors[1])
        bound = max(max_abs_error(FLOAT24, t) for t in inputs) + max_abs_error(FLOAT24, expected)
        error = float(np.max(np.abs(tensors[0] - expected)))
        assert 0 < error <= bound * 1.01
    finally:
        for averager in averagers:
            await averager.close()
            await averager.dht.close()


async def averagers_of(make_host: MakeHost, count: int) -> list[Averager]:
    """``count`` averagers on loopback sharing one DHT, in one group, averaging with float24."""
    config = replace(PATIENT, target_group_size=count, codec=FLOAT24)
    averagers: list[Averager] = []
    for index in range(count):
        host = await make_host(NET)
        dht = DHTNode(HostTransport(host), DHTConfig(rpc_timeout=2.0))
        first = [] if index == 0 else [str(averagers[0].host.addresses[0])]
        await dht.start(first)
        averagers.append(Averager(host, dht, "everywhere", config))
    for averager in averagers:
        await averager.dht.wait_bootstrapped()
    return averagers


class Pipe:
    """Both ends of an expert call's stream, for its data frames: what is sent is received."""

    def __init__(self) -> None:
        self.data = bytearray()

    async def send_data(self, data: bytes | memoryview) -> None:
        self.data += memoryview(data).cast("B")

    async def recv_data_into(self, destination: memoryview) -> None:
        view = memoryview(destination).cast("B")
        view[:] = self.data[: len(view)]
        del self.data[: len(view)]
