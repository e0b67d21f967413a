"""An OpenAI-compatible embeddings endpoint (`[memory.embedding] provider = "openai"`).

`POST <url>/embeddings {"model", "input": [texts], "encoding_format": "float"}` answered by
`{"data": [{"index", "embedding": [floats]}]}`: OpenAI's API, and what Ollama, vLLM, LM Studio
and most hosted providers serve. Each request has one deadline for connecting, sending and
reading the whole answer (a server that sends a byte a second still times out); the answer
is read up to a cap sized from the batch; every vector's size is checked against
`dimensions`. Anything else is `EmbeddingUnavailable`, whose message names the endpoint and
what went wrong, never the key. Redirects are not followed: only the configured URL is trusted.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Sequence
from typing import Any

import anyio
import httpx2

from mongogate.config import EmbeddingSettings
from mongogate.errors import ConfigError, EmbeddingUnavailable
from mongogate.version import __version__

log = logging.getLogger(__name__)

__all__ = ["OpenAIEmbedder"]

#: bytes of an answer beyond the vectors themselves (usage, model name, keys)
ANSWER_OVERHEAD = 64 * 1024
#: bytes one float may take in the answer's JSON ("-0.012345678901234567, " and then some)
BYTES_PER_FLOAT = 32
#: statuses a retry will not fix: a bad key, a wrong URL or model, a refused request
_PERMANENT = frozenset({400, 401, 403, 404, 405, 413, 422})


class OpenAIEmbedder:
    """Texts to unit vectors through an OpenAI-compatible `/embeddings` endpoint."""

    def __init__(self, settings: EmbeddingSettings) -> None:
        if settings.provider != "openai" or not settings.url or not settings.model or not settings.dimensions:
            raise ConfigError("memory.embedding: provider 'openai' needs url, model and dimensions")
        self.settings = settings
        self.model: str = settings.model
        self.dimensions: int = settings.dimensions
        self.endpoint = settings.url.rstrip("/") + "/embeddings"
        self._key: str | None = None
        if settings.api_key_env is not None:
            key = os.environ.get(settings.api_key_env, "")
            if not key.strip():
                raise ConfigError(
                    f"memory.embedding.api_key_env names {settings.api_key_env}, which is not set "
                    "(or empty) in this process's environment"
                )
            self._key = key.strip()

    def __repr__(self) -> str:  # never the key
        return f"OpenAIEmbedder(endpoint={self.endpoint!r}, model={self.model!r}, dims={self.dimensions})"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        size = self.settings.batch_size
        for start in range(0, len(texts), size):
            out += await self._batch(list(texts[start : start + size]))
        return out

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.settings.request_dimensions:
            body["dimensions"] = self.dimensions
        headers = {"Content-Type": "application/json", "User-Agent": f"mongogate/{__version__}"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key}"
        cap = ANSWER_OVERHEAD + len(texts) * self.dimensions * BYTES_PER_FLOAT
        timeout = self.settings.timeout_s
        try:
            with anyio.fail_after(timeout):
                status, raw = await self._post(body, headers, cap)
        except (TimeoutError, httpx2.TimeoutException):  # the deadline, or the client's own timeout
            what = f"did not answer within {timeout:g} s (memory.embedding.timeout_s)"
            raise self._unavailable(what) from None
        except httpx2.HTTPError as e:
            log.info("embedding request to %s failed: %r", self.endpoint, e)
            raise self._unavailable(f"could not be reached ({type(e).__name__})") from None
        if status != 200:
            detail = _error_message(raw)
            if self._key and self._key in detail:  # a server that echoes the key back
                detail = detail.replace(self._key, "***")
            raise self._unavailable(
                f"answered HTTP {status}{f': {detail}' if detail else ''}", permanent=status in _PERMANENT
            )
        if raw is None:
            raise self._unavailable(f"sent more than {cap} bytes for {len(texts)} texts")
        return self._vectors(raw, len(texts))

    async def _post(
        self, body: dict[str, Any], headers: dict[str, str], cap: int
    ) -> tuple[int, bytes | None]:
        """(status, answer bytes), or (status, None) when the answer passed `cap` bytes."""
        timeout = httpx2.Timeout(self.settings.timeout_s)
        content = json.dumps(body).encode()
        async with (
            httpx2.AsyncClient(timeout=timeout, follow_redirects=False) as client,
            client.stream("POST", self.endpoint, content=content, headers=headers) as answer,
        ):
            chunks: list[bytes] = []
            size = 0
            limit = cap if answer.status_code == 200 else 4096  # an error page: its start is enough
            # decoded chunks: a compressed answer is capped as it inflates, not after
            async for chunk in answer.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    if answer.status_code == 200:
                        return answer.status_code, None
                    break
                chunks.append(chunk)
            return answer.status_code, b"".join(chunks)

    def _vectors(self, raw: bytes, count: int) -> list[list[float]]:
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            raise self._unavailable("answered something that is not JSON") from None
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list) or len(data) != count:
            got = len(data) if isinstance(data, list) else "no"
            raise self._unavailable(f"answered {got} embeddings for {count} texts")
        by_index: dict[int, list[float]] = {}
        for position, item in enumerate(data):
            index = item.get("index", position) if isinstance(item, dict) else None
            vec = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
                index = -1
            if index < 0 or index in by_index:
                raise self._unavailable(f"answered embedding {position} with a missing or repeated index")
            by_index[index] = self._unit(vec, index)
        return [by_index[i] for i in range(count)]

    def _unit(self, vec: Any, index: int) -> list[float]:
        """One answer's vector checked (size, numbers, finite, not zero) and scaled to length 1."""
        if not isinstance(vec, list):
            raise self._unavailable(f"answered embedding {index} as something other than a list of numbers")
        if len(vec) != self.dimensions:
            raise self._unavailable(
                f"answered a {len(vec)}-dimension embedding; memory.embedding.dimensions is "
                f"{self.dimensions} (model {self.model!r} returns another size: fix dimensions, "
                "or set request_dimensions)",
                permanent=True,
            )
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vec):
            raise self._unavailable(f"answered embedding {index} with values that are not numbers")
        floats = [float(x) for x in vec]
        norm = math.sqrt(math.fsum(x * x for x in floats))
        if not math.isfinite(norm) or norm == 0.0:
            raise self._unavailable(f"answered embedding {index} with a zero, NaN or infinite vector")
        return [x / norm for x in floats]

    def _unavailable(self, what: str, *, permanent: bool = False) -> EmbeddingUnavailable:
        err = EmbeddingUnavailable(f"the embedding endpoint {self.endpoint} {what}")
        if permanent:  # a retry cannot succeed until the configuration or the endpoint changes
            err.retryable = False
        log.warning("%s", err)
        return err


def _error_message(raw: bytes | None) -> str:
    """The `error.message` of an OpenAI-style error body, cut and printable ('' if none)."""
    if not raw:
        return ""
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if not isinstance(message, str):
        return ""
    return "".join(c if c.isprintable() else " " for c in message)[:200]
