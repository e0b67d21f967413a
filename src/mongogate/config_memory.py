"""`[memory]`, `[memory.long_term]`, `[memory.embedding]`: conversations, long-term memory and
the model that embeds it. Exported by config.py."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from mongogate.config_sections import Section, https_or_loopback

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _endpoint_problem(url: str, *, key: bool) -> str | None:
    """Why an embeddings base URL is unusable, or None. An API key never travels over plain
    http to another machine; without a key, http to a local-network server (Ollama, vLLM) is fine."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as e:
        return f"not a URL ({e})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "give an http(s):// base URL such as https://api.openai.com/v1"
    if parts.username or parts.password or parts.query or parts.fragment:
        return "no credentials, query or fragment in the URL (the key comes from api_key_env)"
    if key and not https_or_loopback(url):
        return "an API key is only sent over https:// (http:// only to 127.0.0.1, ::1 or localhost)"
    return None


class EmbeddingSettings(Section):
    """`[memory.embedding]`: which model turns memory text into vectors (long-term memory)."""

    #: "local": the wordllama model shipped inside its wheel (offline, no key); "openai": an
    #: OpenAI-compatible embeddings endpoint (hosted APIs, Ollama, vLLM); "onnx": a sentence
    #: embedding model in ONNX form from a local folder (`path`; needs the `onnx` extra)
    provider: Literal["local", "openai", "onnx"] = "local"
    #: the endpoint's base URL for provider "openai" (".../v1"; `/embeddings` is appended)
    url: str | None = None
    #: the model name sent to the endpoint (provider "openai"); for "onnx" the name stored on each
    #: memory (default "onnx/" + the folder's name)
    model: str | None = None
    #: the vector size the model returns (providers "openai" and "onnx"; checked on every answer)
    dimensions: int | None = Field(default=None, ge=1, le=8192)
    #: provider "onnx": a folder holding `model.onnx` and its `tokenizer.json` (a sentence
    #: embedding model, e.g. all-MiniLM-L6-v2 exported to ONNX); read at start, never downloaded
    path: str | None = None
    #: provider "onnx": CPU threads one embedding call may use
    threads: int = Field(default=1, ge=1, le=64)
    #: the NAME of the environment variable that holds the API key (never the key itself)
    api_key_env: str | None = None
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    #: texts per embeddings request
    batch_size: int = Field(default=64, ge=1, le=2048)
    #: send `dimensions` in the request (OpenAI's text-embedding-3 models shorten their vectors to
    #: it; many local servers refuse the field); off: only check the answer's size
    request_dimensions: bool = False

    @model_validator(mode="after")
    def _provider_fields(self) -> EmbeddingSettings:
        remote = ("url", "model", "dimensions", "api_key_env", "path")
        if self.provider == "local":
            stray = [f for f in remote if getattr(self, f) is not None]
            if stray:
                raise ValueError(
                    f"{', '.join(stray)} set with provider 'local' (the built-in model takes none); "
                    'set provider = "openai" to use an embeddings endpoint'
                )
            return self
        if self.provider == "onnx":
            return self._onnx_fields()
        return self._openai_fields()

    def _openai_fields(self) -> EmbeddingSettings:
        if self.path is not None:
            raise ValueError("path is for provider 'onnx' (a local model folder), not 'openai'")
        missing = [f for f in ("url", "model", "dimensions") if getattr(self, f) is None]
        if missing:
            raise ValueError(
                f"provider 'openai' needs {', '.join(missing)} (e.g. url = \"https://api.openai.com/v1\", "
                'model = "text-embedding-3-small", dimensions = 1536)'
            )
        problem = _endpoint_problem(str(self.url), key=self.api_key_env is not None)
        if problem:
            raise ValueError(f"url {self.url!r}: {problem}")
        if not 1 <= len(str(self.model)) <= 200 or any(not c.isprintable() for c in str(self.model)):
            raise ValueError("model must be 1 to 200 printable characters")
        if self.api_key_env is not None and not _ENV_NAME.fullmatch(self.api_key_env):
            raise ValueError(
                f"api_key_env {self.api_key_env!r} must be the NAME of an environment variable "
                "(letters, digits, _), e.g. OPENAI_API_KEY; the key itself never goes in the file"
            )
        return self

    def _onnx_fields(self) -> EmbeddingSettings:
        stray = [f for f in ("url", "api_key_env") if getattr(self, f) is not None]
        if stray:
            raise ValueError(f"{', '.join(stray)} set with provider 'onnx' (a local model takes none)")
        if self.path is None or self.dimensions is None:
            raise ValueError(
                "provider 'onnx' needs path and dimensions (e.g. path = \"/opt/models/all-MiniLM-L6-v2\", "
                "a folder holding model.onnx and tokenizer.json, dimensions = 384)"
            )
        if self.model is not None and (
            not 1 <= len(self.model) <= 200 or any(not c.isprintable() for c in self.model)
        ):
            raise ValueError("model must be 1 to 200 printable characters")
        return self


class LongTermSettings(Section):
    """`[memory.long_term]`: memories that outlive a session (remember / recall / forget)."""

    #: "tenant": every principal of a tenant shares its memories; "subject": each subject its own
    scope: Literal["tenant", "subject"] = "tenant"
    #: memories one scope may hold; a `remember` past it is refused, nothing written
    max_per_scope: int = Field(default=10_000, ge=1, le=10_000_000)
    max_text_bytes: int = Field(default=8 * 1024, ge=16, le=1024 * 1024)
    max_query_chars: int = Field(default=2000, ge=16, le=100_000)
    default_recall_limit: int = Field(default=5, ge=1)
    max_recall_limit: int = Field(default=50, ge=1, le=1000)
    #: bytes of a recall / list_memories response before it is cut (`truncated`)
    max_response_bytes: int = Field(default=256 * 1024, ge=1024)
    #: "auto": $vectorSearch where the deployment has it, else an exact scan in mongogate
    vector_search: Literal["auto", "atlas", "scan"] = "auto"
    vector_index_name: str = Field(default="mongogate_memory_vectors", min_length=1, max_length=64)
    #: the most vectors the exact scan reads for one recall (a scope larger than this: the newest)
    max_scan: int = Field(default=20_000, ge=100, le=1_000_000)
    max_ttl_days: int = Field(default=36_500, ge=1, le=36_500)
    #: bytes (MB) the in-process indexes may hold: recall's of every scope and search_messages' of
    #: every conversation scope, one budget; least recently used out first, across both
    index_budget_mb: int = Field(default=256, ge=1, le=1_000_000)
    #: the share of `index_budget_mb` one tenant holds (its memories' and conversations' scopes
    #: together) before, while the budget is full, its own scopes go first and never another
    #: tenant's: one tenant's large indexes (a 256 KiB message of random words costs about 7 MB)
    #: cannot evict every other tenant's. Binds only while the budget is full (a tenant alone
    #: may use all of it); 1: only a tenant holding more than the whole budget loses its own first
    index_tenant_share: float = Field(default=0.25, gt=0.0, le=1.0)
    #: recall returns only memories scoring at least this (0 to 1); a recall's own min_score overrides.
    #: A memory's score is mostly its recall's best match (0.9 x the best fused score + 0.1 x its own),
    #: so the floor asks "is anything stored about this question?". 0.065 (`scoring.FLOOR`) costs
    #: answerable questions no recall@3 on benchmarks/floor_at3.py's held-out halves; how many
    #: questions about nothing stored it empties depends on the embedder (docs/long-term-memory.md)
    min_score: float = Field(default=0.065, ge=0.0, le=1.0)
    #: scopes the caller's token or API key must grant for every long-term memory tool, checked like
    #: a query tool's `required_scopes` (`[unauthorized]` naming the missing ones); empty: none
    required_scopes: list[str] = Field(default_factory=list, max_length=32)
    #: the cosine of two memories' meanings from which one may be an older value of the other: a
    #: remember lists the older ones this close (`similar`), a recall marks a memory with a newer
    #: one this close (`newer_similar`); measured on benchmarks/data/similar_pairs.jsonl (updates
    #: against merely related facts, benchmarks/similar_facts.py): at 0.6 the held-out half's
    #: precision 0.70, recall 0.62, and a notice from an unrelated memory on 2% of remembers. 1: never
    similar_min_score: float = Field(default=0.6, ge=0.0, le=1.0)


class MessageSearchSettings(Section):
    """`[memory.search]`: how `search_messages` ranks conversation messages."""

    #: rank by meaning too: each message's embedding (`[memory.embedding]`'s model, derived after
    #: the message is written and stored beside it) fused with its term score, as recall ranks;
    #: off: term matches only (BM25). An embedder that fails falls back to term matches, no error
    embed_messages: bool = True
    #: search returns only messages scoring at least this (0 to 1), the score recall shows (mostly
    #: the best match's: a question about nothing said returns none); 0.15 costs answerable
    #: questions at most 1 point of recall@3 on benchmarks/floor_messages.py's halves and empties
    #: 41-77% of questions about nothing said (recall's 0.065 emptied 0-12% of them); unset: the
    #: same floor as `memory.long_term.min_score`
    min_score: float | None = Field(default=0.15, ge=0.0, le=1.0)
    #: the most characters of one message embedded (its beginning); a longer message is still
    #: found by every term of its whole text
    embed_chars: int = Field(default=2048, ge=64, le=1_000_000)
    #: the most messages one call derives (terms and vector), a search's or the background's; the
    #: rest is left to the background, a batch at a time, tenants in turn
    embed_per_call: int = Field(default=32, ge=1, le=10_000)
    #: ignored since issue 36: message vectors are stored beside the messages and held in the
    #: process's one index budget (`memory.long_term.index_budget_mb`); kept so older
    #: configuration files still load
    cache_messages: int | None = Field(default=None, ge=0, le=10_000_000)


class MemorySettings(Section):
    max_message_bytes: int = Field(default=256 * 1024, ge=1)
    default_context_limit: int = Field(default=40, ge=1)
    max_context_limit: int = Field(default=200, ge=1)
    lease_ms: int = Field(default=30_000, ge=100)
    max_lease_ms: int = Field(default=3_600_000, ge=100)
    max_id_length: int = Field(default=200, ge=8, le=1000)
    max_state_bytes: int = Field(default=1024 * 1024, ge=1)
    completed_run_ttl_s: int | None = Field(default=None, ge=60)
    #: erase sessions idle this many days and messages older than this (TTL indexes); None: keep
    retention_days: int | None = Field(default=None, ge=1, le=36_500)
    #: context reads advise compaction (`compaction_advised`) past this many unsummarised bytes
    compact_after_bytes: int = Field(default=64 * 1024, ge=1)
    #: whose conversations a caller sees: "scope" follows `long_term.scope` (per subject under
    #: "subject", per tenant under "tenant"); "tenant": always the tenant's (the older behaviour)
    conversations: Literal["scope", "tenant"] = "scope"
    long_term: LongTermSettings = Field(default_factory=LongTermSettings)
    search: MessageSearchSettings = Field(default_factory=MessageSearchSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
