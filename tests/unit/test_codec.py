"""Large payloads are compressed, small ones stay readable JSON, and both come back intact; with a
key every payload is sealed with AES-256-GCM, and what cannot be opened says which key it needs."""

from __future__ import annotations

import base64
import os

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure

from admitflow.codec import (
    COMPRESSED,
    DATA_CONVERTER,
    ENCRYPTED,
    KEY_ID_METADATA,
    THRESHOLD,
    EncryptionConfigError,
    LargePayloadCodec,
    PayloadDecryptionError,
    data_converter,
    encryption_codec,
    key_fingerprint,
)

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
    with pytest.raises(PayloadDecryptionError) as err:
        await DATA_CONVERTER.payload_codec.decode(written)
    assert str(err.value) == "payload encrypted with key id k7; set ADMITFLOW_ENCRYPTION_KEY (and ADMITFLOW_ENCRYPTION_KEY_ID) to that key"
    # The same error reaches whoever decodes a value through the converter.
    with pytest.raises(PayloadDecryptionError, match="key id k7"):
        await DATA_CONVERTER.decode(written, [dict])


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
        other = Payloads(payloads=encryption_codec_sync({"ADMITFLOW_ENCRYPTION_KEY": b64(KEY_2), "ADMITFLOW_ENCRYPTION_KEY_ID": "k2"}))
        status, body = post("/decode", json_format.MessageToJson(other).encode())
        assert (status, body.decode().strip()) == (
            400, "payload encrypted with key id k2; this process has key ids k1: set ADMITFLOW_ENCRYPTION_KEY "
            "(and ADMITFLOW_ENCRYPTION_KEY_ID) to that key, or list it in ADMITFLOW_DECRYPTION_KEYS"
        )
    finally:
        httpd.shutdown()
        httpd.server_close()


def encryption_codec_sync(env) -> list[Payload]:
    import asyncio

    return asyncio.run(encryption_codec(env).encode([SMALL]))
