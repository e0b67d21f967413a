"""`search_messages` measured as `floor_at3.py` measures recall (issue 39 item 5): the conversation
sets' turns stored as messages (one session per dated session, one tenant per conversation), each
question searched (limit 10) as the tool would with `[memory.search]`'s defaults: recall@3 and
recall@10 of answerable questions, and the share of questions about things never stored
(`longconv_text.UNRELATED_*`) that come back empty, per half. Messages are searched through the
message index (`memory/search.py`, issue 36), every message derived first as the server's background
derives it; its ranking is recall's (`indexing/scope_index.py`: `scoring.shown`, the evidence gate
per embedder, the floor).

    python benchmarks/floor_messages.py                  # embed_messages on and off, writes RESULTS.md
    python benchmarks/floor_messages.py --floors 0.1,0.3 # also these `min_score` values (by meaning)

"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from pymongo import AsyncMongoClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lib.convset import build as convset
from lib.longconv import UNRELATED_HELD_OUT, UNRELATED_TUNING
from lib.longconv import load as longconv
from lib.results import command_line, parser, publish

from mongogate.clock import SYSTEM_CLOCK
from mongogate.config import MemorySettings, MessageSearchSettings
from mongogate.db import EmbeddedEngine
from mongogate.indexing import IndexBudget
from mongogate.memory.keys import message_id
from mongogate.memory.search import MessageSearch
from mongogate.memory.store import MemoryStore
from mongogate.recall.embedding import LocalEmbedder

Turns = list[tuple[str, int, str, str]]  # (turn id, session, speaker, text)


async def load_conversation(store: MemoryStore, tenant: str, turns: Turns) -> dict[tuple[str, int], str]:
    """The turns as messages of one session per dated session; (session id, seq) -> turn id."""
    now = SYSTEM_CLOCK.now()
    where: dict[tuple[str, int], str] = {}
    sessions: dict[int, str] = {}
    docs = []
    for tid, session, speaker, text in turns:
        if session not in sessions:
            sessions[session] = await store.create_session(tenant)
        sid = sessions[session]
        seq = sum(1 for k in where if k[0] == sid) + 1
        where[(sid, seq)] = tid
        role = "user" if speaker == "user" else "assistant"
        docs.append(
            {"_id": message_id(sid, f"k{tid}"), "tenant": tenant, "session_id": sid, "seq": seq,
             "key": f"k{tid}", "role": role, "created_at": now, "content": text}
        )  # fmt: skip
    await store.messages.insert_many(docs)
    return where


async def derive(search: MessageSearch, tenant: str) -> None:
    """Every message of the tenant's conversations derived (terms, and a vector with an embedder),
    a batch at a time, as the server's background does after each write."""
    scope, _ = await search.index.fresh(tenant, None, tenant=tenant)
    ids = list(scope.pending)
    for at in range(0, len(ids), search.fill.per_call):
        await search.fill.fill(tenant, ids[at : at + search.fill.per_call], tenant=tenant)


async def run(floors: tuple[float, ...] = ()) -> list[str]:
    defaults = MessageSearchSettings()
    floor = MemorySettings().long_term.min_score if defaults.min_score is None else defaults.min_score
    sets: dict[str, list[Any]] = {"convset": convset(), "longconv": longconv()}
    out = [f"[memory.search] defaults: embed_messages {defaults.embed_messages}, min_score {floor}"]
    with tempfile.TemporaryDirectory() as tmp:
        engine = EmbeddedEngine(Path(tmp))
        try:
            client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(engine.start())
            store = MemoryStore(client["floor"], MemorySettings(), SYSTEM_CLOCK)
            await store.ensure_indexes()
            budget = IndexBudget(1024 * 2**20)
            meaning = MessageSearch(store, budget, LocalEmbedder(), defaults, min_score=floor)
            terms = MessageSearch(store, budget, None, defaults, min_score=floor)
            for name, convs in sets.items():
                runs: tuple[tuple[str, MessageSearch, float], ...] = (
                    ("by meaning (default)", meaning, floor),
                    ("by meaning, min_score 0", meaning, 0.0),
                    ("terms only", terms, floor),
                    *((f"by meaning, min_score {f}", meaning, f) for f in floors),
                )
                for label, vec, at in runs:
                    counts: dict[str, list[float]] = {}
                    for c in convs:
                        tenant = f"{name}-{c.id}"
                        turns = [(t.id, t.session, t.speaker, t.text) for t in c.turns]
                        if label == runs[0][0]:
                            where = await load_conversation(store, tenant, turns)
                            c.__dict__["where"] = where
                            await derive(meaning, tenant)
                        where = c.__dict__["where"]
                        half = "tuning" if c.tuning else "held-out"
                        for q in c.questions:
                            hits = (
                                await vec.search(tenant, q.text, limit=10, min_score=at, owner=tenant)
                            ).messages
                            ids = [where[(h.session_id, h.seq)] for h in hits]
                            want = set(q.evidence)
                            counts.setdefault(f"{half} @3", []).append(bool(set(ids[:3]) & want))
                            counts.setdefault(f"{half} @10", []).append(bool(set(ids) & want))
                        for q_text in UNRELATED_TUNING if c.tuning else UNRELATED_HELD_OUT:
                            hits = (
                                await vec.search(tenant, q_text, limit=10, min_score=at, owner=tenant)
                            ).messages
                            counts.setdefault(f"{half} emptied", []).append(not hits)
                    cells = "  ".join(
                        f"{k} {100 * sum(v) / len(v):5.1f}"
                        for k, v in sorted(counts.items(), key=lambda kv: kv[0])
                    )
                    out.append(f"  {name:<9} {label:<26} {cells}")
        finally:
            engine.stop()
    return out


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--floors", default="", help="comma-separated min_score values to measure too")
    args = p.parse_args()
    floors = tuple(float(f) for f in args.floors.split(",") if f)
    started = time.perf_counter()
    lines = anyio.run(run, floors)
    lines.append(f"({time.perf_counter() - started:.0f} s)")
    body = "\n".join(["```", command_line("floor_messages.py", None), *lines, "```", ""])
    publish("search_messages and the floor (issue 39 item 5)", body, not args.no_write)


if __name__ == "__main__":
    main()
