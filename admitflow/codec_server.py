"""A codec server for the Temporal Web UI and the `temporal` CLI (`admitflow codec-server`).

Temporal's remote codec protocol: `POST <endpoint>/decode` and `POST <endpoint>/encode` with a
JSON body `{"payloads": [...]}`, each payload in protobuf's JSON form (metadata values and data
base64), answered in the same form. The UI calls it from the browser, so the server answers CORS
preflights for the origins it is told to trust. It holds the same keys as the workers (from the
environment), so it turns `binary/encrypted` and `binary/zlib` payloads back into readable JSON;
anyone who can reach it can read every payload, so it listens on 127.0.0.1 unless told otherwise.
A payload it cannot decode (no key for it, altered, not zlib) is answered, in its place, as JSON
that says why: `{"undecodablePayload": {"encoding": ..., "reason": ...}}`; the others decode as usual.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.converter import PayloadCodec

from admitflow.codec import undecodable_reason

DEFAULT_ORIGINS = ("http://localhost:8233", "http://127.0.0.1:8233")
MAX_BODY = 8 * 1024 * 1024


def server(codec: PayloadCodec, host: str = "127.0.0.1", port: int = 8081,
           origins: Sequence[str] = DEFAULT_ORIGINS) -> ThreadingHTTPServer:
    """The HTTP server, bound and ready for `serve_forever()`."""
    allowed = tuple(o.rstrip("/") for o in origins)

    class Handler(BaseHTTPRequestHandler):
        server_version = "admitflow-codec-server"

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - the stdlib's name
            pass

        def _cors(self) -> None:
            origin = self.headers.get("Origin", "")
            if "*" in allowed:
                self.send_header("Access-Control-Allow-Origin", origin or "*")
            elif origin.rstrip("/") in allowed:
                self.send_header("Access-Control-Allow-Origin", origin)
            else:
                return
            self.send_header("Vary", "Origin")
            self.send_header("Access-Control-Allow-Credentials", "true")
            self.send_header("Access-Control-Allow-Methods", "POST, OPTIONS")
            self.send_header("Access-Control-Allow-Headers", "Content-Type, X-Namespace, Authorization")

        def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
            self.send_response(status)
            self._cors()
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_OPTIONS(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(200)
            self._cors()
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0].rstrip("/")
            decoding = path.endswith("/decode")
            if decoding:
                fn = codec.decode
            elif path.endswith("/encode"):
                fn = codec.encode
            else:
                self._reply(404, b"not found: POST .../encode or .../decode\n", "text/plain")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._reply(413, b"payloads too large\n", "text/plain")
                return
            try:
                payloads = json_format.Parse(self.rfile.read(length) or b"{}", Payloads())
            except (json_format.ParseError, UnicodeDecodeError) as err:
                self._reply(400, f"bad request: {err}\n".encode(), "text/plain")
                return
            try:
                result = asyncio.run(fn(payloads.payloads))
            except Exception as err:  # a codec that raises rather than marking: its one line
                self._reply(400, f"{err}\n".encode(), "text/plain")
                return
            if decoding:
                result = [shown(p) for p in result]
            answer = json_format.MessageToDict(Payloads(payloads=result))
            answer.setdefault("payloads", [])
            body = json.dumps(answer).encode()
            self._reply(200, body)

    httpd = ThreadingHTTPServer((host, port), Handler)
    httpd.daemon_threads = True
    return httpd


def shown(p: Payload) -> Payload:
    """A payload as the UI and the `temporal` CLI are to show it: one that could not be decoded as
    JSON naming the encoding it claimed and why (they would show the marker's bytes otherwise)."""
    marked = undecodable_reason(p)
    if marked is None:
        return p
    encoding, reason = marked
    body = {"undecodablePayload": {"encoding": encoding, "reason": reason}}
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(body).encode())
