"""Large payloads are compressed, small ones stay readable JSON, and both come back intact."""

from __future__ import annotations

from temporalio.api.common.v1 import Payload

from admitflow.codec import COMPRESSED, THRESHOLD, LargePayloadCodec


async def test_small_payloads_pass_untouched_and_large_ones_round_trip():
    codec = LargePayloadCodec()
    small = Payload(metadata={"encoding": b"json/plain"}, data=b'{"a": 1}')
    large = Payload(metadata={"encoding": b"json/plain", "x": b"y"}, data=b'{"entries": [' + b'{"key": "default/w"},' * 20000 + b"0]}")
    assert large.ByteSize() > THRESHOLD
    encoded = await codec.encode([small, large])
    assert encoded[0] == small
    assert encoded[1].metadata["encoding"] == COMPRESSED
    assert encoded[1].ByteSize() < large.ByteSize() // 20
    assert await codec.decode(encoded) == [small, large]
