"""search_messages with and without meaning (`[memory.search] embed_messages`), interleaved.

    .venv/bin/python benchmarks/message_search.py [messages ...]   # default: 1000

Seeds one tenant's session with N messages (insert_many), then times rounds of: BM25 alone,
fused with a warm in-process cache, and the first (cold) fused search. Prints p50s and ratios.
"""

from __future__ import annotations

import statistics
import sys
import time

import anyio
from pymongo import AsyncMongoClient

from mongogate.clock import SYSTEM_CLOCK
from mongogate.config import MemorySettings
from mongogate.db import EmbeddedEngine
from mongogate.memory.message_vectors import MessageVectors
from mongogate.memory.search import search_messages
from mongogate.memory.store import MemoryStore
from mongogate.recall.embedding import LocalEmbedder

WORDS = "deploy invoice lisbon fern report server budget meeting parcel weather car trip".split()  # noqa: SIM905


async def bench(n: int, rounds: int = 5) -> str:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        engine = EmbeddedEngine(Path(tmp))
        try:
            client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(engine.start())
            store = MemoryStore(client["bench"], MemorySettings(), SYSTEM_CLOCK)
            await store.ensure_indexes()
            sid = await store.create_session("acme")
            now = SYSTEM_CLOCK.now()
            docs = [
                {
                    "tenant": "acme",
                    "session_id": sid,
                    "seq": i + 1,
                    "key": f"k{i}",
                    "role": "user",
                    "created_at": now,
                    "content": f"note {i}: the {WORDS[i % 12]} and the {WORDS[(i * 7) % 12]} came up again",
                }
                for i in range(n)
            ]
            for i in range(0, n, 1000):
                await store.messages.insert_many(docs[i : i + 1000])
            vectors = MessageVectors(LocalEmbedder())
            t = time.perf_counter()
            await search_messages(store, "acme", "when is my plane to Portugal", vectors=vectors)
            cold = (time.perf_counter() - t) * 1000
            plain: list[float] = []
            fused: list[float] = []
            for _ in range(rounds):
                for kind, out in (("plain", plain), ("fused", fused)):
                    t = time.perf_counter()
                    await search_messages(
                        store, "acme", "budget meeting", vectors=vectors if kind == "fused" else None
                    )
                    out.append((time.perf_counter() - t) * 1000)
            p, f = statistics.median(plain), statistics.median(fused)
            return (
                f"{n} messages: BM25 p50 {p:.0f} ms, fused (warm) p50 {f:.0f} ms (x{f / p:.2f}), "
                f"first fused (cold) {cold:.0f} ms"
            )
        finally:
            engine.stop()


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [1000]
    for n in sizes:
        print(anyio.run(bench, n))


if __name__ == "__main__":
    main()
