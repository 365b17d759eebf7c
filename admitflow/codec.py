"""Payload encoding for every admitflow client and worker.

Payloads stay JSON (Kueue's camelCase, through Temporal's pydantic converter), readable in the UI
and the `temporal` CLI. Only payloads larger than 64 KiB are compressed with zlib: a ClusterQueue
continuing as new with 10,000 pending workloads carries about 4 MB of JSON, which compresses to
under 300 KiB, within Temporal's 512 KiB payload warning and far from its 2 MiB limit. A compressed
payload is the whole original payload (metadata and data), zlib-compressed, with encoding
`binary/zlib`; any client can undo it.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec

COMPRESSED = b"binary/zlib"
THRESHOLD = 64 * 1024


class LargePayloadCodec(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [_compress(p) if p.ByteSize() > THRESHOLD else p for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [_decompress(p) if p.metadata.get("encoding") == COMPRESSED else p for p in payloads]


def _compress(p: Payload) -> Payload:
    return Payload(metadata={"encoding": COMPRESSED}, data=zlib.compress(p.SerializeToString(), 6))


def _decompress(p: Payload) -> Payload:
    return Payload.FromString(zlib.decompress(p.data))


DATA_CONVERTER: DataConverter = dataclasses.replace(pydantic_data_converter, payload_codec=LargePayloadCodec())
