"""Payload encoding for every admitflow client and worker.

Payloads stay JSON (Kueue's camelCase, through Temporal's pydantic converter), readable in the UI
and the `temporal` CLI. Only payloads larger than 64 KiB are compressed with zlib: a ClusterQueue
continuing as new with 10,000 pending workloads carries about 4 MB of JSON, which compresses to
under 300 KiB, within Temporal's 512 KiB payload warning and far from its 2 MiB limit. A compressed
payload is the whole original payload (metadata and data), zlib-compressed, with encoding
`binary/zlib`; any client can undo it.

Optionally every payload is also encrypted at rest (docs/security.md): with
ADMITFLOW_ENCRYPTION_KEY set (base64 of 32 bytes), each payload, compressed first if it is large,
is serialized and sealed with AES-256-GCM, in the layout of Temporal's encryption samples:
metadata `encoding: binary/encrypted` and `encryption-key-id: <id>`, data = 12-byte nonce +
ciphertext + tag. Failure messages and stack traces then travel encoded too. Keys rotate by id:
the current key encrypts, and ADMITFLOW_DECRYPTION_KEYS lists older ones that still decrypt.

Every process builds its converter with `data_converter()`, which reads the environment;
`DATA_CONVERTER` is the converter without encryption, for tests and tools that talk to a server they
started themselves.

A payload that cannot be decoded never fails a workflow task (docs/contract.md, "Payloads that
cannot be decoded"): `binary/zlib` data that does not decompress, `binary/encrypted` data without
the key or altered, an encoding no converter reads, JSON that does not parse. The codec turns it
into a marker payload (encoding `admitflow/undecodable`, with the one-line reason), never written
anywhere; the payload converter then raises PayloadDecodeError with that reason when it is to be
made a value, so every client, the CLI and typed workflow handlers get a clear error. Only in the
engine's workers (`for_workers`) does an untyped argument or result become an
`admitflow.wire.Undecodable` instead, which the workload workflow refuses and records. The codec
server shows the reason as JSON.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from google.protobuf.message import DecodeError
from pydantic import ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.common import RawValue
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    PayloadCodec,
    PayloadConverter,
)

from admitflow.wire import Undecodable

COMPRESSED = b"binary/zlib"
THRESHOLD = 64 * 1024
# A `binary/zlib` payload that would inflate past this is refused rather than filling the memory of
# whoever decodes it (a ClusterQueue with 10,000 pending workloads carries about 4 MB).
MAX_DECOMPRESSED = 256 * 1024 * 1024

UNDECODABLE = b"admitflow/undecodable"
REASON_METADATA = "reason"
CLAIMED_METADATA = "claimed-encoding"
# What a payload may be encoded as: the converter's encodings, and the codec's.
READS = ("json/plain", "binary/null", "binary/plain", "json/protobuf", "binary/protobuf", "binary/zlib", "binary/encrypted")

ENCRYPTED = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
KEY_ENV = "ADMITFLOW_ENCRYPTION_KEY"
KEY_ID_ENV = "ADMITFLOW_ENCRYPTION_KEY_ID"
OLD_KEYS_ENV = "ADMITFLOW_DECRYPTION_KEYS"
NONCE_SIZE = 12
KEY_SIZE = 32


class EncryptionConfigError(ValueError):
    """The encryption settings in the environment cannot be used; the message is one line."""


class PayloadDecodeError(ValueError):
    """A payload that cannot be decoded; the message is the one-line reason."""


class PayloadDecryptionError(PayloadDecodeError):
    """An encrypted payload this process cannot decrypt; the message says which key it needs."""


class LargePayloadCodec(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [_compress(p) if p.ByteSize() > THRESHOLD else p for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [_decompress(p) if p.metadata.get("encoding") == COMPRESSED else p for p in payloads]


def _compress(p: Payload) -> Payload:
    return Payload(metadata={"encoding": COMPRESSED}, data=zlib.compress(p.SerializeToString(), 6))


def _decompress(p: Payload) -> Payload:
    inflate = zlib.decompressobj()
    try:
        data = inflate.decompress(p.data, MAX_DECOMPRESSED + 1)
    except zlib.error as err:
        raise PayloadDecodeError(f"payload encoding binary/zlib does not decompress: {err}") from None
    if len(data) > MAX_DECOMPRESSED:
        raise PayloadDecodeError(f"payload encoding binary/zlib decompresses to more than {MAX_DECOMPRESSED >> 20} MiB")
    if not inflate.eof:
        raise PayloadDecodeError("payload encoding binary/zlib does not decompress: incomplete or truncated stream")
    return _inner(data, "payload encoding binary/zlib")


def _inner(data: bytes, what: str) -> Payload:
    """The Payload a compressed or encrypted one holds."""
    try:
        return Payload.FromString(data)
    except DecodeError as err:
        raise PayloadDecodeError(f"{what} does not hold a payload: {err}") from None


def key_fingerprint(key: bytes) -> str:
    """The id a key gets when none is named: it differs between keys, so rotation needs no naming."""
    return "sha256-" + hashlib.sha256(key).hexdigest()[:12]


class EncryptionCodec(PayloadCodec):
    """AES-256-GCM over whole payloads. `key` (with `key_id`) encrypts; `old_keys` only decrypt.
    Without a current key nothing is encrypted, but payloads sealed with an old key still open:
    the way to turn encryption off without losing what was written."""

    def __init__(self, key_id: str | None, key: bytes | None, old_keys: Mapping[str, bytes] | None = None) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if (key is None) != (key_id is None):
            raise ValueError("key and key_id go together")
        self.key_id = key_id
        self._keys = {kid: AESGCM(k) for kid, k in (old_keys or {}).items()}
        if key is not None and key_id is not None:
            self._keys[key_id] = AESGCM(key)

    @property
    def key_ids(self) -> list[str]:
        return list(self._keys)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if self.key_id is None:
            return list(payloads)
        aead = self._keys[self.key_id]
        out = []
        for p in payloads:
            nonce = os.urandom(NONCE_SIZE)
            sealed = nonce + aead.encrypt(nonce, p.SerializeToString(), None)
            out.append(Payload(metadata={"encoding": ENCRYPTED, KEY_ID_METADATA: self.key_id.encode()}, data=sealed))
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        from cryptography.exceptions import InvalidTag

        out = []
        for p in payloads:
            if p.metadata.get("encoding") != ENCRYPTED:
                out.append(p)
                continue
            key_id = encrypted_key_id(p)
            aead = self._keys.get(key_id)
            if aead is None:
                raise PayloadDecryptionError(
                    f"payload encrypted with key id {key_id}; this process has key ids {', '.join(self._keys)}: "
                    f"set {KEY_ENV} (and {KEY_ID_ENV}) to that key, or list it in {OLD_KEYS_ENV}"
                )
            try:
                plain = aead.decrypt(p.data[:NONCE_SIZE], p.data[NONCE_SIZE:], None)
            except (InvalidTag, ValueError):  # ValueError: shorter than a nonce
                raise PayloadDecryptionError(
                    f"payload encrypted with key id {key_id} does not decrypt with this process's key of that id "
                    "(a different key under the same id, or the payload was altered)"
                ) from None
            out.append(_inner(plain, f"payload encrypted with key id {key_id}"))
        return out


class RefuseEncrypted(PayloadCodec):
    """Without any key: pass everything through, but name the missing key instead of letting the
    JSON converter choke on ciphertext."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        for p in payloads:
            if p.metadata.get("encoding") == ENCRYPTED:
                raise PayloadDecryptionError(
                    f"payload encrypted with key id {encrypted_key_id(p)}; set {KEY_ENV} (and {KEY_ID_ENV}) to that key"
                )
        return list(payloads)


class ChainCodec(PayloadCodec):
    """Codecs applied in order on encode and in reverse on decode (compress, then encrypt). Decoding
    never fails: a payload that does not decode becomes a marker with the reason (`undecodable`),
    in its place, and the others decode as usual."""

    def __init__(self, *codecs: PayloadCodec) -> None:
        self.codecs = codecs

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = list(payloads)
        for c in self.codecs:
            out = await c.encode(out)
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [await self._decode(p) for p in payloads]

    async def _decode(self, p: Payload) -> Payload:
        one = [p]
        try:
            for c in reversed(self.codecs):
                one = await c.decode(one)
        except PayloadDecodeError as err:
            return undecodable(p, str(err))
        [decoded] = one
        if decoded.metadata.get("encoding") == UNDECODABLE:  # the mark is ours alone: never taken from outside
            return undecodable(p, _unknown(decoded))
        return decoded


def undecodable(p: Payload, reason: str) -> Payload:
    """The marker that stands for payload `p`, which could not be decoded: the reason in its
    metadata, `p` itself (serialized) as its data."""
    return Payload(
        metadata={"encoding": UNDECODABLE, REASON_METADATA: reason.encode(), CLAIMED_METADATA: p.metadata.get("encoding", b"")},
        data=p.SerializeToString(),
    )


def undecodable_reason(p: Payload) -> tuple[str, str] | None:
    """(the encoding it claimed, the reason) of a marker made by `undecodable`; None for any other payload."""
    if p.metadata.get("encoding") != UNDECODABLE:
        return None
    return _text(p.metadata.get(CLAIMED_METADATA, b"")), _text(p.metadata.get(REASON_METADATA, b""))


def _text(raw: bytes) -> str:
    return " ".join(raw.decode(errors="replace").split())  # one line, whatever it held


def _unknown(p: Payload) -> str:
    return f"payload encoding {_text(p.metadata.get('encoding', b'')) or '(none)'} is not one admitflow reads ({', '.join(READS)})"


class AdmitflowPayloadConverter(PydanticPayloadConverter):
    """Pydantic JSON (the wire format). A payload the codec marked as undecodable, or one whose
    encoding no converter reads, raises PayloadDecodeError with its reason (PayloadDecryptionError
    when it was encrypted): wherever a value is decoded, the caller learns why in one line.

    One instance per class, built once: the SDK builds a payload converter for every DataConverter,
    and a worker builds two DataConverters for every workflow activation (to decode it and to encode
    its completion) and one more for every workflow run. Each new instance built its composite of
    converters again and started with an empty cache of pydantic TypeAdapters, so every payload of
    every activation built its adapter again (docs/performance-log.md). The instance holds nothing but
    that cache, which is thread-safe."""

    # An untyped argument or result gets an Undecodable instead (the engine's workers: `for_workers`).
    tolerant = False

    def __new__(cls) -> AdmitflowPayloadConverter:
        shared = cls.__dict__.get("_shared")
        if shared is None:
            shared = super().__new__(cls)
            PydanticPayloadConverter.__init__(shared)
            cls._shared = shared  # two threads may both build one the first time: either serves
        return shared

    def __init__(self) -> None:
        """Built once, in `__new__`."""

    def from_payloads(self, payloads: Sequence[Payload], type_hints: list[type] | None = None) -> list[Any]:
        hints: list[Any] = list(type_hints or [])
        hints += [None] * (len(payloads) - len(hints))
        return [self._value(p, hint) for p, hint in zip(payloads, hints)]

    def _value(self, p: Payload, hint: Any) -> Any:
        if hint is RawValue:
            return RawValue(p)
        marked = undecodable_reason(p)
        if marked is not None:
            claimed, reason = marked
        elif p.metadata.get("encoding") not in self.converters:
            claimed, reason = _text(p.metadata.get("encoding", b"")), _unknown(p)
        else:
            try:
                return super().from_payloads([p], None if hint is None else [hint])[0]
            except Exception as err:
                if hint is not None and self._parses(p):
                    raise  # as the SDK raises it: a value that does not fit the type asked for
                claimed = _text(p.metadata["encoding"])
                reason = f"payload encoding {claimed} does not parse: {_first_line(err)}"
        if self.tolerant and hint is None:
            return Undecodable(encoding=claimed, reason=reason)
        raise (PayloadDecryptionError if claimed == ENCRYPTED.decode() else PayloadDecodeError)(reason)

    def _parses(self, p: Payload) -> bool:
        try:
            super().from_payloads([p], None)
        except Exception:
            return False
        return True


class WorkerPayloadConverter(AdmitflowPayloadConverter):
    """The engine workers' (`for_workers`): an untyped argument or result that cannot be decoded is
    an `Undecodable`, which the workload workflow refuses and records; a typed one still raises."""

    tolerant = True


def _first_line(err: Exception) -> str:
    cause = err.__cause__ if isinstance(err, RuntimeError) and err.__cause__ is not None else err
    if isinstance(cause, ValidationError):
        return cause.errors()[0]["msg"]
    return _text(str(cause).encode()) or type(cause).__name__


class _ReadableFailures:
    """A failure whose encoded message and stack trace could not be decoded says why, instead of
    the SDK's bare `Encoded failure`."""

    def from_failure(self, failure: Failure, payload_converter: PayloadConverter) -> BaseException:
        marked = undecodable_reason(failure.encoded_attributes) if failure.HasField("encoded_attributes") else None
        if marked is not None:
            readable = Failure()
            readable.CopyFrom(failure)
            readable.ClearField("encoded_attributes")
            readable.message = f"Encoded failure that cannot be read: {marked[1]}"
            failure = readable
        return super().from_failure(failure, payload_converter)  # type: ignore[misc]


class FailureConverter(_ReadableFailures, DefaultFailureConverter):
    pass


class EncodedFailureConverter(_ReadableFailures, DefaultFailureConverterWithEncodedAttributes):
    pass


def encrypted_key_id(p: Payload) -> str:
    return p.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace") or "(none)"


def parse_key(text: str, where: str) -> bytes:
    """A 32-byte key from base64 (standard or URL-safe); EncryptionConfigError naming `where`."""
    cleaned = text.strip()
    try:
        key = base64.b64decode(cleaned.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise EncryptionConfigError(
            f"{where} is not base64; make a key with: openssl rand -base64 {KEY_SIZE}"
        ) from None
    if len(key) != KEY_SIZE:
        raise EncryptionConfigError(
            f"{where} must be base64 of {KEY_SIZE} bytes (AES-256), got {len(key)} bytes; "
            f"make a key with: openssl rand -base64 {KEY_SIZE}"
        )
    return key


def _check_key_id(key_id: str, where: str) -> str:
    if not key_id or not key_id.isascii() or not key_id.isprintable() or any(c in key_id for c in ",: "):
        raise EncryptionConfigError(f"{where} {key_id!r}: a key id is printable ASCII without spaces, ',' or ':'")
    return key_id


def encryption_codec(environ: Mapping[str, str] | None = None) -> EncryptionCodec | None:
    """The encryption the environment asks for, or None; EncryptionConfigError if it is unusable.

    ADMITFLOW_ENCRYPTION_KEY      base64 of 32 bytes: encrypts every payload written
    ADMITFLOW_ENCRYPTION_KEY_ID   its id in each payload's metadata (default: a fingerprint of the key)
    ADMITFLOW_DECRYPTION_KEYS     older keys that still decrypt: comma-separated `ID:BASE64`, or BASE64
                                  alone for a key that had the default id
    """
    env = os.environ if environ is None else environ
    raw_key = env.get(KEY_ENV, "").strip()
    raw_id = env.get(KEY_ID_ENV, "").strip()
    raw_old = env.get(OLD_KEYS_ENV, "").strip()
    if raw_id and not raw_key:
        raise EncryptionConfigError(f"{KEY_ID_ENV} is set but {KEY_ENV} is not")
    key = key_id = None
    if raw_key:
        key = parse_key(raw_key, KEY_ENV)
        key_id = _check_key_id(raw_id, KEY_ID_ENV) if raw_id else key_fingerprint(key)
    old: dict[str, bytes] = {}
    for i, entry in enumerate(e.strip() for e in raw_old.split(",") if e.strip()):
        where = f"{OLD_KEYS_ENV} entry {i + 1}"
        if ":" in entry:
            kid, _, text = entry.partition(":")
            old_key = parse_key(text, where)
            old[_check_key_id(kid.strip(), f"{where}: key id")] = old_key
        else:
            old_key = parse_key(entry, where)
            old[key_fingerprint(old_key)] = old_key
    if key is None and not old:
        return None
    if key is not None and key_id in old and old[key_id] != key:
        raise EncryptionConfigError(f"{OLD_KEYS_ENV} has a different key under the current key id {key_id}")
    return EncryptionCodec(key_id, key, old)


def data_converter(environ: Mapping[str, str] | None = None) -> DataConverter:
    """The converter of every admitflow process: pydantic JSON, large payloads compressed, and all
    payloads encrypted when the environment holds a key (EncryptionConfigError, one line, if it
    holds a bad one)."""
    encryption = encryption_codec(environ)
    base = dataclasses.replace(
        pydantic_data_converter, payload_converter_class=AdmitflowPayloadConverter, failure_converter_class=FailureConverter
    )
    if encryption is None:
        return dataclasses.replace(base, payload_codec=ChainCodec(LargePayloadCodec(), RefuseEncrypted()))
    return dataclasses.replace(
        base,
        payload_codec=ChainCodec(LargePayloadCodec(), encryption),
        # Failure messages can name workloads; with encryption they go into the encoded attributes.
        failure_converter_class=EncodedFailureConverter,
    )


def for_workers(converter: DataConverter) -> DataConverter:
    """The converter of an engine worker, made from its client's: the same, but an untyped workflow
    argument or result that cannot be decoded arrives as an `Undecodable` (the workload workflow
    refuses and records the message) instead of raising, which would fail the workflow task.
    A converter that is not admitflow's is returned as it is."""
    if converter.payload_converter_class is AdmitflowPayloadConverter:
        return dataclasses.replace(converter, payload_converter_class=WorkerPayloadConverter)
    return converter


DATA_CONVERTER: DataConverter = data_converter({})
