"""Large payloads are compressed, small ones stay readable JSON, and both come back intact; with a
key every payload is sealed with AES-256-GCM, and what cannot be opened says which key it needs.

A payload that cannot be decoded, whatever the reason (`BAD`), never makes decoding fail for the
engine's workers: an untyped argument gets an `Undecodable` with the one-line reason, in its place
among the others; everyone else (a typed argument, a client) gets PayloadDecodeError with that
line, and the codec server shows it as JSON.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import zlib
from typing import Any

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from admitflow import codec as codec_module
from admitflow.codec import (
    COMPRESSED,
    DATA_CONVERTER,
    ENCRYPTED,
    KEY_ID_METADATA,
    THRESHOLD,
    UNDECODABLE,
    AdmitflowPayloadConverter,
    EncryptionConfigError,
    LargePayloadCodec,
    PayloadDecodeError,
    PayloadDecryptionError,
    data_converter,
    encryption_codec,
    for_workers,
    key_fingerprint,
    undecodable,
    undecodable_reason,
    WorkerPayloadConverter,
)
from admitflow.codec_server import shown
from admitflow.wire import Undecodable

KEY_1 = os.urandom(32)
KEY_2 = os.urandom(32)


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


SMALL = Payload(metadata={"encoding": b"json/plain"}, data=b'{"metadata": {"name": "pretrain-secret"}}')
LARGE = Payload(
    metadata={"encoding": b"json/plain", "x": b"y"}, data=b'{"entries": [' + b'{"key": "default/w"},' * 20000 + b"0]}"
)


async def test_small_payloads_pass_untouched_and_large_ones_round_trip():
    codec = LargePayloadCodec()
    assert LARGE.ByteSize() > THRESHOLD
    encoded = await codec.encode([SMALL, LARGE])
    assert encoded[0] == SMALL
    assert encoded[1].metadata["encoding"] == COMPRESSED
    assert encoded[1].ByteSize() < LARGE.ByteSize() // 20
    assert await codec.decode(encoded) == [SMALL, LARGE]


async def test_without_a_key_the_converter_leaves_small_payloads_as_json():
    codec = data_converter({}).payload_codec
    assert await codec.encode([SMALL]) == [SMALL]


async def test_with_a_key_every_payload_is_sealed_and_large_ones_are_compressed_first():
    codec = data_converter({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1), "ADMITFLOW_ENCRYPTION_KEY_ID": "k1"}).payload_codec
    small, large = await codec.encode([SMALL, LARGE])
    for p in (small, large):
        assert p.metadata["encoding"] == ENCRYPTED
        assert p.metadata[KEY_ID_METADATA] == b"k1"
    assert b"pretrain-secret" not in small.SerializeToString()
    assert b"default/w" not in large.SerializeToString()
    # Compressed before sealing: ciphertext of compressed data, far smaller than the JSON.
    assert large.ByteSize() < LARGE.ByteSize() // 20
    assert await codec.decode([small, large]) == [SMALL, LARGE]


async def test_the_same_payload_encrypts_differently_each_time():
    codec = encryption_codec({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1)})
    a, b = await codec.encode([SMALL, SMALL])
    assert a.data != b.data
    assert SMALL.data not in a.data


async def test_the_key_id_defaults_to_a_fingerprint_of_the_key():
    codec = encryption_codec({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1)})
    [p] = await codec.encode([SMALL])
    assert p.metadata[KEY_ID_METADATA].decode() == key_fingerprint(KEY_1) != key_fingerprint(KEY_2)


async def test_after_rotation_old_payloads_still_open_with_the_old_key_listed():
    old = encryption_codec({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1), "ADMITFLOW_ENCRYPTION_KEY_ID": "2024"})
    written_before = await old.encode([SMALL])
    rotated = encryption_codec({
        "ADMITFLOW_ENCRYPTION_KEY": b64(KEY_2), "ADMITFLOW_ENCRYPTION_KEY_ID": "2025",
        "ADMITFLOW_DECRYPTION_KEYS": f"2024:{b64(KEY_1)}",
    })
    written_after = await rotated.encode([SMALL])
    assert written_after[0].metadata[KEY_ID_METADATA] == b"2025"
    assert await rotated.decode(written_before + written_after) == [SMALL, SMALL]
    # The old process cannot read what the new key wrote, and says so.
    with pytest.raises(PayloadDecryptionError, match="payload encrypted with key id 2025; this process has key ids 2024"):
        await old.decode(written_after)


async def test_an_old_key_listed_without_an_id_matches_its_default_id():
    old = encryption_codec({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1)})
    written = await old.encode([SMALL])
    rotated = encryption_codec({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_2), "ADMITFLOW_DECRYPTION_KEYS": b64(KEY_1)})
    assert await rotated.decode(written) == [SMALL]


async def test_with_only_old_keys_nothing_new_is_encrypted_but_old_payloads_open():
    old = encryption_codec({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1), "ADMITFLOW_ENCRYPTION_KEY_ID": "k1"})
    written = await old.encode([SMALL])
    decrypt_only = data_converter({"ADMITFLOW_DECRYPTION_KEYS": f"k1:{b64(KEY_1)}"}).payload_codec
    assert await decrypt_only.encode([SMALL]) == [SMALL]
    assert await decrypt_only.decode(written + [SMALL]) == [SMALL, SMALL]


async def test_a_different_key_under_the_same_id_fails_clearly():
    writer = encryption_codec({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1), "ADMITFLOW_ENCRYPTION_KEY_ID": "prod"})
    reader = encryption_codec({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_2), "ADMITFLOW_ENCRYPTION_KEY_ID": "prod"})
    written = await writer.encode([SMALL])
    with pytest.raises(PayloadDecryptionError, match=r"key id prod does not decrypt with this process's key of that id"):
        await reader.decode(written)


async def test_a_tampered_payload_is_refused():
    codec = encryption_codec({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1)})
    [p] = await codec.encode([SMALL])
    p.data = p.data[:-1] + bytes([p.data[-1] ^ 1])
    with pytest.raises(PayloadDecryptionError, match="the payload was altered"):
        await codec.decode([p])


async def test_an_encrypted_payload_without_any_key_names_the_key_and_the_variable():
    written = await encryption_codec({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1), "ADMITFLOW_ENCRYPTION_KEY_ID": "k7"}).encode([SMALL])
    missing = "payload encrypted with key id k7; set ADMITFLOW_ENCRYPTION_KEY (and ADMITFLOW_ENCRYPTION_KEY_ID) to that key"
    # The codec marks it with the reason; whoever decodes a value through the converter gets that error.
    [marked] = await DATA_CONVERTER.payload_codec.decode(written)
    assert undecodable_reason(marked) == ("binary/encrypted", missing)
    with pytest.raises(PayloadDecryptionError) as err:
        await DATA_CONVERTER.decode(written, [dict])
    assert str(err.value) == missing


async def test_values_round_trip_through_the_whole_converter_and_failures_are_encoded():
    env = {"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1)}
    converter = data_converter(env)
    [p] = await converter.encode([{"name": "pretrain-secret"}])
    assert p.metadata["encoding"] == ENCRYPTED
    assert await data_converter(env).decode([p], [dict]) == [{"name": "pretrain-secret"}]
    failure = Failure()
    await converter.encode_failure(ValueError("workload team-a/pretrain-secret is not valid"), failure)
    assert b"pretrain-secret" not in failure.SerializeToString()
    error = await data_converter(env).decode_failure(failure)
    assert "workload team-a/pretrain-secret is not valid" in str(error)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        pytest.param(
            {"ADMITFLOW_ENCRYPTION_KEY": "not base64!"},
            "ADMITFLOW_ENCRYPTION_KEY is not base64; make a key with: openssl rand -base64 32",
            id="a key that is not base64",
        ),
        pytest.param(
            {"ADMITFLOW_ENCRYPTION_KEY": b64(os.urandom(16))},
            "ADMITFLOW_ENCRYPTION_KEY must be base64 of 32 bytes (AES-256), got 16 bytes; make a key with: openssl rand -base64 32",
            id="a 128-bit key",
        ),
        pytest.param(
            {"ADMITFLOW_ENCRYPTION_KEY_ID": "k1"},
            "ADMITFLOW_ENCRYPTION_KEY_ID is set but ADMITFLOW_ENCRYPTION_KEY is not",
            id="a key id without a key",
        ),
        pytest.param(
            {"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1), "ADMITFLOW_ENCRYPTION_KEY_ID": "a b"},
            "ADMITFLOW_ENCRYPTION_KEY_ID 'a b': a key id is printable ASCII without spaces, ',' or ':'",
            id="a key id with a space",
        ),
        pytest.param(
            {"ADMITFLOW_DECRYPTION_KEYS": f"old:{b64(KEY_1)},older:zzz"},
            "ADMITFLOW_DECRYPTION_KEYS entry 2 is not base64; make a key with: openssl rand -base64 32",
            id="a bad old key names its entry",
        ),
        pytest.param(
            {"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1), "ADMITFLOW_ENCRYPTION_KEY_ID": "k",
             "ADMITFLOW_DECRYPTION_KEYS": f"k:{b64(KEY_2)}"},
            "ADMITFLOW_DECRYPTION_KEYS has a different key under the current key id k",
            id="an old key under the current id",
        ),
    ],
)
def test_unusable_settings_are_refused_in_one_line(env, message):
    with pytest.raises(EncryptionConfigError) as err:
        data_converter(env)
    assert str(err.value) == message


def test_url_safe_base64_keys_are_accepted():
    key = bytes(range(250, 256)) * 5 + b"\xfb\xff"
    assert encryption_codec({"ADMITFLOW_ENCRYPTION_KEY": base64.urlsafe_b64encode(key).decode()}).key_id == key_fingerprint(key)


def test_the_codec_server_answers_in_temporals_protocol_and_refuses_clearly():
    import threading
    import urllib.error
    import urllib.request

    from google.protobuf import json_format
    from temporalio.api.common.v1 import Payloads

    from admitflow.codec_server import server

    env = {"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1), "ADMITFLOW_ENCRYPTION_KEY_ID": "k1"}
    httpd = server(data_converter(env).payload_codec, port=0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"

    def post(path: str, body: bytes) -> tuple[int, bytes]:
        req = urllib.request.Request(base + path, data=body, method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    try:
        # /encode then /decode, under a namespace prefix as the CLI's {namespace} templating gives.
        status, sealed = post("/team-a/encode", json_format.MessageToJson(Payloads(payloads=[SMALL, LARGE])).encode())
        assert status == 200
        encoded = json_format.Parse(sealed, Payloads()).payloads
        assert [p.metadata["encoding"] for p in encoded] == [ENCRYPTED, ENCRYPTED]
        status, opened = post("/decode", sealed)
        assert status == 200
        assert list(json_format.Parse(opened, Payloads()).payloads) == [SMALL, LARGE]
        assert post("/decode", b"{}") == (200, b'{"payloads": []}')
        assert post("/nothing", b"{}")[0] == 404
        assert post("/decode", b"not json")[0] == 400
        # What it cannot decode is answered in its place as JSON saying why; the rest decodes as usual.
        other = Payloads(payloads=[SMALL, *encryption_codec_sync({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_2), "ADMITFLOW_ENCRYPTION_KEY_ID": "k2"})])
        status, body = post("/decode", json_format.MessageToJson(other).encode())
        assert status == 200
        good, bad = json_format.Parse(body, Payloads()).payloads
        assert good == SMALL
        assert bad.metadata["encoding"] == b"json/plain"
        assert json.loads(bad.data) == {"undecodablePayload": {"encoding": "binary/encrypted", "reason": (
            "payload encrypted with key id k2; this process has key ids k1: set ADMITFLOW_ENCRYPTION_KEY "
            "(and ADMITFLOW_ENCRYPTION_KEY_ID) to that key, or list it in ADMITFLOW_DECRYPTION_KEYS"
        )}}
    finally:
        httpd.shutdown()
        httpd.server_close()


def encryption_codec_sync(env) -> list[Payload]:
    import asyncio

    return asyncio.run(encryption_codec(env).encode([SMALL]))


# --- payloads that cannot be decoded ----------------------------------------------------------------

KEYED = {"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_1), "ADMITFLOW_ENCRYPTION_KEY_ID": "k1"}
READS = "json/plain, binary/null, binary/plain, json/protobuf, binary/protobuf, binary/zlib, binary/encrypted"
NOT_A_PAYLOAD = b"\xff\xff\xff\xff not a payload"
CORRUPT = "Error parsing message with type 'temporal.api.common.v1.Payload': Wire format was corrupt"


def sealed(data: bytes, key: bytes = KEY_1, key_id: bytes = b"k1") -> Payload:
    nonce = os.urandom(12)
    return Payload(metadata={"encoding": ENCRYPTED, KEY_ID_METADATA: key_id}, data=nonce + AESGCM(key).encrypt(nonce, data, None))


def altered(p: Payload) -> Payload:
    return Payload(metadata=p.metadata, data=p.data[:-1] + bytes([p.data[-1] ^ 1]))


BAD = [
    pytest.param(
        {}, Payload(metadata={"encoding": COMPRESSED}, data=b"not zlib at all"),
        "payload encoding binary/zlib does not decompress: Error -3 while decompressing data: incorrect header check",
        id="binary/zlib that does not decompress",
    ),
    pytest.param(
        {}, Payload(metadata={"encoding": COMPRESSED}, data=zlib.compress(SMALL.SerializeToString())[:-6]),
        "payload encoding binary/zlib does not decompress: incomplete or truncated stream",
        id="binary/zlib cut short",
    ),
    pytest.param(
        {}, Payload(metadata={"encoding": COMPRESSED}, data=zlib.compress(NOT_A_PAYLOAD)),
        f"payload encoding binary/zlib does not hold a payload: {CORRUPT}",
        id="binary/zlib of bytes that are not a payload",
    ),
    pytest.param(
        {}, sealed(SMALL.SerializeToString(), key_id=b"k7"),
        "payload encrypted with key id k7; set ADMITFLOW_ENCRYPTION_KEY (and ADMITFLOW_ENCRYPTION_KEY_ID) to that key",
        id="binary/encrypted in a process without any key",
    ),
    pytest.param(
        KEYED, sealed(SMALL.SerializeToString(), KEY_2, b"k2"),
        "payload encrypted with key id k2; this process has key ids k1: set ADMITFLOW_ENCRYPTION_KEY "
        "(and ADMITFLOW_ENCRYPTION_KEY_ID) to that key, or list it in ADMITFLOW_DECRYPTION_KEYS",
        id="binary/encrypted with a key id this process does not have",
    ),
    pytest.param(
        KEYED, altered(sealed(SMALL.SerializeToString())),
        "payload encrypted with key id k1 does not decrypt with this process's key of that id "
        "(a different key under the same id, or the payload was altered)",
        id="binary/encrypted and altered",
    ),
    pytest.param(
        KEYED, Payload(metadata={"encoding": ENCRYPTED, KEY_ID_METADATA: b"k1"}, data=b"short"),
        "payload encrypted with key id k1 does not decrypt with this process's key of that id "
        "(a different key under the same id, or the payload was altered)",
        id="binary/encrypted shorter than its nonce",
    ),
    pytest.param(
        KEYED, sealed(NOT_A_PAYLOAD),
        f"payload encrypted with key id k1 does not hold a payload: {CORRUPT}",
        id="binary/encrypted of bytes that are not a payload",
    ),
    pytest.param(
        {}, Payload(metadata={"encoding": b"binary/msgpack"}, data=b"\x81\xa4name\xa6budget"),
        f"payload encoding binary/msgpack is not one admitflow reads ({READS})",
        id="an encoding nobody writes",
    ),
    pytest.param(
        {}, Payload(data=b'{"name": "budget"}'),
        f"payload encoding (none) is not one admitflow reads ({READS})",
        id="no encoding at all",
    ),
    pytest.param(
        {}, Payload(metadata={"encoding": b"json/plain"}, data=b'{"name": "budget", "state": Ready}'),
        "payload encoding json/plain does not parse: Invalid JSON: expected value at line 1 column 29",
        id="json/plain that does not parse",
    ),
    pytest.param(
        {}, Payload(metadata={"encoding": b"json/protobuf", "messageType": b"no.such.Message"}, data=b"{}"),
        "payload encoding json/protobuf does not parse: Unknown Protobuf type no.such.Message",
        id="json/protobuf of a type nobody knows",
    ),
    pytest.param(
        {}, Payload(metadata={"encoding": UNDECODABLE, "reason": b"trust me"}, data=b""),
        f"payload encoding admitflow/undecodable is not one admitflow reads ({READS})",
        id="admitflow's own mark, sent from outside",
    ),
]


def claimed(p: Payload) -> str:
    return p.metadata.get("encoding", b"").decode()


@pytest.mark.parametrize(("env", "bad", "reason"), BAD)
async def test_an_undecodable_payload_reaches_a_worker_as_its_reason_and_everyone_else_as_an_error(env, bad, reason):
    # A worker's untyped arguments: the reason in its place, the others decoded as usual.
    worker = for_workers(data_converter(env))
    assert await worker.decode([SMALL, bad, SMALL]) == [
        json.loads(SMALL.data), Undecodable(encoding=claimed(bad), reason=reason), json.loads(SMALL.data)
    ]
    # A typed argument (a typed workflow handler, an activity) and a client: the reason as the error.
    error = PayloadDecryptionError if claimed(bad) == "binary/encrypted" else PayloadDecodeError
    for converter, hints in ((worker, [dict]), (worker, [Any]), (data_converter(env), None), (data_converter(env), [dict])):
        with pytest.raises(error) as err:
            await converter.decode([bad], hints)
        assert str(err.value) == reason
    # The codec server (the UI, the `temporal` CLI): JSON that says why, for what the codec itself
    # cannot open; an encoding it does not handle passes, as the UI shows it.
    [marked] = await data_converter(env).payload_codec.decode([bad])
    if claimed(bad) in ("binary/zlib", "binary/encrypted", "admitflow/undecodable"):
        assert json.loads(shown(marked).data) == {"undecodablePayload": {"encoding": claimed(bad), "reason": reason}}
    else:
        assert shown(marked) == bad


async def test_a_zlib_payload_that_would_inflate_past_the_limit_is_refused(monkeypatch):
    monkeypatch.setattr(codec_module, "MAX_DECOMPRESSED", 1024 * 1024)
    bomb = Payload(metadata={"encoding": COMPRESSED}, data=zlib.compress(b"\0" * (1024 * 1024 + 1)))
    assert len(bomb.data) < 2048
    [value] = await for_workers(DATA_CONVERTER).decode([bomb])
    assert value == Undecodable(encoding="binary/zlib", reason="payload encoding binary/zlib decompresses to more than 1 MiB")
    within = Payload(metadata={"encoding": COMPRESSED}, data=zlib.compress(SMALL.SerializeToString()))
    assert await DATA_CONVERTER.decode([within]) == [json.loads(SMALL.data)]


def test_the_mark_says_what_it_stands_for_and_other_payloads_are_not_marks():
    marked = undecodable(SMALL, "payload encoding binary/zlib does not decompress:\n  two lines")
    assert undecodable_reason(marked) == ("json/plain", "payload encoding binary/zlib does not decompress: two lines")
    assert Payload.FromString(marked.data) == SMALL
    assert undecodable_reason(SMALL) is None
    assert shown(SMALL) is SMALL


async def test_a_failure_whose_encoded_message_cannot_be_decoded_says_why():
    keyed = data_converter(KEYED)
    failure = Failure()
    await keyed.encode_failure(ApplicationError("workload team-a/pretrain-secret is not valid", type="Refused"), failure)
    stranger = data_converter({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_2), "ADMITFLOW_ENCRYPTION_KEY_ID": "k2"})
    for converter in (stranger, for_workers(stranger)):
        copy = Failure()
        copy.CopyFrom(failure)
        error = await converter.decode_failure(copy)
        assert isinstance(error, ApplicationError) and error.type == "Refused"
        assert error.message == (
            "Encoded failure that cannot be read: payload encrypted with key id k1; this process has key ids k2: "
            "set ADMITFLOW_ENCRYPTION_KEY (and ADMITFLOW_ENCRYPTION_KEY_ID) to that key, or list it in ADMITFLOW_DECRYPTION_KEYS"
        )


def test_only_admitflows_converter_is_made_tolerant_for_workers():
    assert for_workers(pydantic_data_converter) is pydantic_data_converter
    worker = for_workers(DATA_CONVERTER)
    assert worker.payload_codec is DATA_CONVERTER.payload_codec
    assert worker.failure_converter_class is DATA_CONVERTER.failure_converter_class


async def test_every_converter_built_by_the_sdk_is_the_one_instance_of_its_kind():
    # The SDK builds a payload converter for every DataConverter it makes (two per workflow activation).
    clients, workers = (AdmitflowPayloadConverter(), AdmitflowPayloadConverter()), (WorkerPayloadConverter(), WorkerPayloadConverter())
    assert clients[0] is clients[1] and workers[0] is workers[1]
    assert clients[0] is not workers[0]
    assert (type(clients[0]).tolerant, type(workers[0]).tolerant) == (False, True)
    made = dataclasses.replace(for_workers(DATA_CONVERTER))
    (payload,) = made.payload_converter.to_payloads([Undecodable(encoding="e", reason="r")])
    assert made.payload_converter.from_payloads([payload], [Undecodable]) == [Undecodable(encoding="e", reason="r")]
    # Still the worker's kind: what it cannot read arrives as an Undecodable.
    (unread,) = made.payload_converter.from_payloads([Payload(metadata={"encoding": b"x"}, data=b"")])
    assert isinstance(unread, Undecodable) and unread.encoding == "x"
