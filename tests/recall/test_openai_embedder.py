"""The OpenAI-compatible embedder against real HTTP servers on 127.0.0.1.

The "ok" server answers the OpenAI embeddings API with the real local model (wordllama), so
the vectors are real; the others misbehave the ways endpoints do: stall, drip, garbage, the
wrong size or count, too much, an error status, a redirect.
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from mongogate.config import EmbeddingSettings, MemorySettings
from mongogate.errors import ConfigError, EmbeddingUnavailable
from mongogate.recall.embedding import LocalEmbedder, make_embedder
from mongogate.recall.openai_embedder import OpenAIEmbedder

pytestmark = pytest.mark.anyio

KEY_ENV = "MONGOGATE_TEST_EMBED_KEY"
KEY = "sk-test-0123456789-secret"
DIMS = LocalEmbedder.dimensions


class _Endpoint(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.model = LocalEmbedder()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up mid-answer (the timeout tests): expected, not news

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Endpoint

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        mode = self.path.split("/")[1]
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length))
        self.server.requests.append({"mode": mode, "headers": dict(self.headers), "body": request})
        texts = request["input"]
        if mode == "stall":  # never answers (until the test ends; bounded)
            self.server.release.wait(30)
            return
        if mode == "drip":  # an answer a byte at a time, slower than the deadline allows
            self.send_response(200)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            for _ in range(200):
                if self.server.release.wait(0.05):
                    return
                self.wfile.write(b" ")
                self.wfile.flush()
            return
        if mode == "garbage":
            return self._send(200, b"<html>gateway says hello</html>", "text/html")
        if mode == "unauthorized":  # echoes the key back, as a careless server might
            auth = self.headers.get("Authorization", "")
            return self._send(401, json.dumps({"error": {"message": f"bad key {auth[7:]}"}}).encode())
        if mode == "broken":
            return self._send(500, b'{"error": {"message": "model crashed\\u001b[2J"}}')
        if mode == "redirect":
            self.send_response(307)
            self.send_header("Location", f"{self.server.base}/ok/v1/embeddings")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        vectors = self.server.model.embed_sync(texts)
        if mode == "short":
            vectors = [v[:128] for v in vectors]
        if mode == "fewer":
            vectors = vectors[:-1]
        if mode == "huge":
            vectors = [v * 40 for v in vectors]
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        if mode == "shuffled":
            random.Random(3).shuffle(data)
        answer = {"object": "list", "data": data, "model": request["model"], "usage": {"total_tokens": 1}}
        self._send(200, json.dumps(answer).encode())


@pytest.fixture(scope="module")
def endpoint() -> Iterator[_Endpoint]:
    server = _Endpoint()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def embedder(endpoint: _Endpoint, mode: str, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> OpenAIEmbedder:
    monkeypatch.setenv(KEY_ENV, KEY)
    settings = EmbeddingSettings(
        provider="openai",
        url=f"{endpoint.base}/{mode}/v1/",
        model="wordllama-served",
        dimensions=DIMS,
        api_key_env=KEY_ENV,
        **({"timeout_s": 5.0} | kw),
    )
    e = make_embedder(settings)
    assert isinstance(e, OpenAIEmbedder)
    return e


async def test_embeds_with_the_served_model_and_sends_the_key(
    endpoint: _Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = ["The user likes dark themes.", "Order ORD-58213 shipped on Monday.", "Water the fern."]
    e = embedder(endpoint, "ok", monkeypatch)
    assert (e.model, e.dimensions) == ("wordllama-served", DIMS)
    got = await e.embed(texts)
    want = LocalEmbedder().embed_sync(texts)
    np.testing.assert_allclose(np.array(got), np.array(want), atol=1e-6)
    assert all(abs(np.linalg.norm(v) - 1.0) < 1e-6 for v in got)
    sent = endpoint.requests[-1]
    assert sent["headers"]["Authorization"] == f"Bearer {KEY}"
    assert sent["body"] == {"model": "wordllama-served", "input": texts, "encoding_format": "float"}
    assert KEY not in repr(e)
    assert await e.embed([]) == []


async def test_batches_keep_order_and_answers_are_put_back_in_index_order(
    endpoint: _Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [f"memory number {i} about topic {i * 7}" for i in range(5)]
    before = len(endpoint.requests)
    got = await embedder(endpoint, "shuffled", monkeypatch, batch_size=2, request_dimensions=True).embed(
        texts
    )
    assert len(endpoint.requests) - before == 3  # 2 + 2 + 1
    assert all(r["body"]["dimensions"] == DIMS for r in endpoint.requests[before:])
    np.testing.assert_allclose(np.array(got), np.array(LocalEmbedder().embed_sync(texts)), atol=1e-6)


@pytest.mark.parametrize(
    ("mode", "message", "retryable"),
    [
        ("garbage", "not JSON", True),
        ("short", "128-dimension embedding; memory.embedding.dimensions is 256", False),
        ("fewer", "answered 1 embeddings for 2 texts", True),
        ("huge", "sent more than", True),
        ("broken", "answered HTTP 500: model crashed", True),
        ("unauthorized", "answered HTTP 401: bad key ***", False),
        ("redirect", "answered HTTP 307", True),
    ],
)
async def test_a_misbehaving_endpoint_is_a_coded_error_naming_it(
    endpoint: _Endpoint,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    message: str,
    retryable: bool,
) -> None:
    caplog.set_level(logging.DEBUG)
    e = embedder(endpoint, mode, monkeypatch)
    with pytest.raises(EmbeddingUnavailable, match=re.escape(message)) as info:
        await e.embed(["one text", "another text"])
    assert info.value.code == "embedding_unavailable"
    assert info.value.retryable is retryable
    assert f"{endpoint.base}/{mode}/v1/embeddings" in str(info.value)
    assert KEY not in str(info.value) and KEY not in caplog.text
    assert "\x1b" not in str(info.value)  # the server's control characters do not reach the model


@pytest.mark.parametrize("mode", ["stall", "drip"])
async def test_a_stalled_or_dripping_endpoint_times_out_once_for_the_whole_answer(
    endpoint: _Endpoint, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    e = embedder(endpoint, mode, monkeypatch, timeout_s=0.3)
    started = time.monotonic()
    with pytest.raises(EmbeddingUnavailable, match=r"did not answer within 0.3 s") as info:
        await e.embed(["hello"])
    assert info.value.retryable
    assert time.monotonic() - started < 5  # one deadline, not one per byte (the drip lasts 10 s)


async def test_an_endpoint_nobody_listens_on_is_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = EmbeddingSettings(provider="openai", url="http://127.0.0.1:1/v1", model="m", dimensions=4)
    with pytest.raises(EmbeddingUnavailable, match="could not be reached") as info:
        await make_embedder(settings).embed(["x"])
    assert info.value.retryable


def test_a_key_variable_that_is_not_set_stops_startup(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MONGOGATE_TEST_NOT_SET", raising=False)
    settings = EmbeddingSettings(
        provider="openai",
        url="https://api.example/v1",
        model="m",
        dimensions=8,
        api_key_env="MONGOGATE_TEST_NOT_SET",
    )
    with pytest.raises(ConfigError, match="MONGOGATE_TEST_NOT_SET, which is not set"):
        make_embedder(settings)


OK = {
    "provider": "openai",
    "url": "https://api.openai.com/v1",
    "model": "text-embedding-3-small",
    "dimensions": 1536,
}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"provider": "openai"}, "needs url, model, dimensions"),
        (OK | {"dimensions": None}, "needs dimensions"),
        (OK | {"url": "ftp://x/v1"}, "http"),
        (OK | {"url": "http://gpu-box:11434/v1", "api_key_env": "K"}, "only sent over https"),
        (OK | {"url": "https://user:pw@api.example/v1"}, "no credentials"),
        (OK | {"url": "https://api.example/v1?api-key=sk"}, "no credentials, query"),
        (OK | {"api_key_env": "sk-live-abc"}, "NAME of an environment variable"),
        (OK | {"model": ""}, "model must be"),
        ({"url": "https://api.example/v1"}, "set with provider 'local'"),
        (OK | {"dimensions": 0}, "greater than or equal to 1"),
    ],
)
def test_embedding_settings_refuse_what_would_fail_later(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        MemorySettings(embedding=EmbeddingSettings(**fields))


@pytest.mark.parametrize(
    "fields",
    [
        OK,
        OK | {"api_key_env": "OPENAI_API_KEY"},
        OK | {"url": "http://gpu-box:11434/v1"},  # a LAN server without a key: plain http is allowed
        OK | {"url": "http://127.0.0.1:11434/v1", "api_key_env": "K"},
        {},
    ],
)
def test_embedding_settings_accept_hosted_and_local_endpoints(fields: dict[str, Any]) -> None:
    assert EmbeddingSettings(**fields).provider == fields.get("provider", "local")
