"""A fenced turn (begin_turn + end_turn): round trips and p50, against the unfenced peer sequence.

On one embedded engine, one database holding 1,000 sessions (seeded, untimed), in rotating order
each round:
- `MCP`: begin_turn then end_turn through the SDK's in-process Client and this tree's server;
- `library`: `Turns.begin_turn` + `Turns.end_turn` of this tree;
- `library@<ref>` (`--baseline`, default `main`): the same two calls of the tree at that git ref
  (its `memory/` package and `leases.py`, loaded from git as `prev_memory`), in a database of its
  own made by its own `ensure_indexes`, seeded alike (with derived `_id`s if that version writes
  them, else ObjectIds: bc6dfd9 and before);
- `peer`: what an agent without fencing does with the driver: read the last 40 messages of its
  session, insert the user message, insert the reply (the same `messages` collection and indexes).
Each variant has its own session of 100 seeded messages. Round trips are counted with a pymongo
CommandListener for one turn of each library version and of the peer.

`--tool-messages K` (issue 38.3): each turn also appends K tool messages between begin_turn and
end_turn, under the lease (`append` with `lease_id`; the peer inserts them), so a turn is
5 + 2K round trips where the first append after a fenced turn used to cost 5.

Run: `.venv/bin/python benchmarks/turn_trips.py [--rounds 30] [--baseline main] [--tool-messages K]
[--section NAME]`;
writes the `## <NAME>` section (default `fenced turn`) of benchmarks/RESULTS.md unless `--no-write`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any

from mcp import Client
from pymongo import DESCENDING, AsyncMongoClient, monitoring

from mongogate.config import MemorySettings, load_settings
from mongogate.db import EmbeddedEngine
from mongogate.memory.keys import message_id
from mongogate.memory.store import MemoryStore
from mongogate.memory.turns import Turns
from mongogate.server.app import build_server

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.gitref import package_at
from lib.results import command_line, parser, publish

from memory import unchecked_seeding  # beside this script

Doc = dict[str, Any]
ROOT = Path(__file__).resolve().parents[1]
TENANT = "acme"
DB = "bench_turns"
#: the previous version's database (its own indexes)
DB_PREV = "bench_turns_prev"
SESSIONS = 1_000
SEEDED_MESSAGES = 100
#: turns of each variant whose commands are counted and timed
COUNTED = 5


class CommandLog(monitoring.CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []
        self.ms: list[float] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.database_name in (DB, DB_PREV):
            self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.database_name in (DB, DB_PREV):
            self.ms.append(event.duration_micros / 1000)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def load_previous(rev: str, into: Path) -> ModuleType:
    """`memory/` and `leases.py` at `rev`, importable as `prev_memory` (imports rewritten)."""
    replace = [
        ("mongogate.memory", "prev_memory"),
        ("from mongogate import leases", "from prev_memory import leases"),
        ("mongogate.leases", "prev_memory.leases"),
    ]
    package_at(
        rev, "src/mongogate/memory", "prev_memory", into, replace, {"src/mongogate/leases.py": "leases.py"}
    )
    return importlib.import_module("prev_memory.turns")


def message(sid: str, i: int) -> Doc:
    role = "user" if i % 2 == 0 else "assistant"
    return {
        "session_id": sid,
        "tenant": TENANT,
        "key": f"seed{i // 2}:{role}",
        "seq": i + 1,
        "turn_id": f"seed{i // 2}",
        "role": role,
        "call_id": None,
        "content": f"seeded message {i}: lorem ipsum dolor sit amet",
        "created_at": dt.datetime.now(dt.UTC),
    }


def variants_of(
    mcp: Any, store: MemoryStore, libraries: dict[str, Any], sids: dict[str, str], tools: int
) -> dict[str, Callable[[str], Awaitable[None]]]:
    """One turn of each variant: MCP, each library version (`Turns` by name), the peer."""

    async def via_mcp(t: str) -> None:
        args = {"session_id": sids["MCP"], "turn_id": t}
        r = await mcp.call_tool("begin_turn", {**args, "text": f"question {t}"})
        assert not r.is_error and r.structured_content, r.content
        lid = r.structured_content["lease_id"]
        for i in range(tools):
            tool = {"role": "tool", "content": f"result {t}.{i}", "call_id": f"c{i}", "lease_id": lid}
            r = await mcp.call_tool("append", {**args, **tool})
            assert not r.is_error, r.content
        r = await mcp.call_tool("end_turn", {**args, "lease_id": lid, "reply": f"answer {t}"})
        assert not r.is_error, r.content

    def via(turns: Any, name: str) -> Callable[[str], Awaitable[None]]:
        async def turn(t: str) -> None:
            start = await turns.begin_turn(TENANT, sids[name], t, f"question {t}")
            assert start.lease_id
            for i in range(tools):
                await turns.store.append(
                    TENANT, sids[name], t, "tool", f"result {t}.{i}", f"c{i}", lease_id=start.lease_id
                )
            await turns.end_turn(TENANT, sids[name], t, start.lease_id, f"answer {t}")

        return turn

    async def peer(t: str) -> None:
        sid = sids["peer"]
        cursor = store.messages.find({"session_id": sid}, sort=[("seq", DESCENDING)], limit=40)
        window = [d async for d in cursor]
        seq = int(window[0]["seq"]) if window else 0
        said: list[tuple[str, str | None, str]] = [("user", None, f"question {t}")]
        said += [("tool", f"c{i}", f"result {t}.{i}") for i in range(tools)]
        for k, (role, cid, text) in enumerate([*said, ("assistant", None, f"answer {t}")]):
            key = f"{t}:{role}" + (f":{cid}" if cid else "")
            doc = {**message(sid, 0), "key": key, "seq": seq + k + 1, "turn_id": t, "call_id": cid}
            # uniqueness as this tree keeps it: the derived _id
            doc["_id"] = message_id(sid, doc["key"])
            await store.messages.insert_one({**doc, "role": role, "content": text})

    return {"MCP": via_mcp, **{name: via(t, name) for name, t in libraries.items()}, "peer": peer}


async def run(
    uri: str, tmp: Path, rounds: int, baseline: str, tools: int = 0
) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    prev_turns = load_previous(baseline, tmp)
    prev_ids = hasattr(importlib.import_module("prev_memory.keys"), "message_id")
    prev = f"library@{baseline}"
    log = CommandLog()
    settings = load_settings(
        None,
        database={"uri": uri, "name": DB},
        server={"data_dir": str(tmp / "data")},
        auth={"mode": "none", "tenant": TENANT},
    )
    async with (
        AsyncMongoClient[Doc](uri, tz_aware=True, event_listeners=[log]) as client,
        Client(build_server(settings)) as mcp,
    ):
        db = client[DB]
        store = MemoryStore(db, MemorySettings())
        await store.ensure_indexes()
        prev_store = prev_turns.MemoryStore(client[DB_PREV], MemorySettings())
        await prev_store.ensure_indexes()
        new, old = Turns(store), prev_turns.Turns(prev_store)
        created = await mcp.call_tool("create_session", {})
        assert created.structured_content is not None
        sids = {
            "MCP": created.structured_content["session_id"],
            "library": await store.create_session(TENANT),
            prev: await prev_store.create_session(TENANT),
            "peer": await store.create_session(TENANT),
        }
        with unchecked_seeding():
            for st in (store, prev_store):
                await st.sessions.insert_many(
                    [{"_id": f"filler{i:05d}", "tenant": TENANT, "next_seq": 0} for i in range(SESSIONS - 4)]
                )
            for name, sid in sids.items():
                st = prev_store if name == prev else store
                docs = [message(sid, i) for i in range(SEEDED_MESSAGES)]
                if st is store or prev_ids:  # as the version writes them (bc6dfd9's: ObjectId ids)
                    docs = [{"_id": message_id(sid, d["key"]), **d} for d in docs]
                await st.messages.insert_many(docs)
                await st.sessions.update_one({"_id": sid}, {"$set": {"next_seq": SEEDED_MESSAGES}})

        variants = variants_of(mcp, store, {"library": new, prev: old}, sids, tools)
        trips: dict[str, list[str]] = {}
        for name in ("library", prev, "peer"):
            await variants[name]("warm")
            per: list[list[float]] = []
            for k in range(COUNTED):
                log.names.clear()
                log.ms.clear()
                await variants[name](f"counted{k}")
                trips[name] = list(log.names)
                per.append(list(log.ms))
            # each command's median duration (as the driver saw it) over the counted turns
            medians = [statistics.median(p[i] for p in per) for i in range(len(trips[name]))]
            trips[name] = [f"{n} {ms:.0f}" for n, ms in zip(trips[name], medians, strict=True)]
        samples: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(rounds + 2):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                t0 = time.perf_counter()
                await variants[name](f"r{r}")
                if r >= 2:
                    samples[name].append(time.perf_counter() - t0)
    return samples, trips


def render(samples: dict[str, list[float]], trips: dict[str, list[str]]) -> str:
    peer = statistics.median(samples["peer"])
    lines = [
        "| variant | round trips | commands (median ms each) | p50 ms | p90 ms | p50 / peer |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for name, s in samples.items():
        p50 = statistics.median(s)
        p90 = statistics.quantiles(s, n=10)[-1]
        counted = trips.get(name if name != "MCP" else "library", [])
        names = ", ".join(counted)
        lines.append(
            f"| {name} | {len(counted)} | {names} | {p50 * 1000:.1f} | {p90 * 1000:.1f} | {p50 / peer:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--baseline", default="main", help="git ref of the library@<ref> variant")
    p.add_argument("--section", default="fenced turn", help="the RESULTS.md section to write")
    p.add_argument(
        "--tool-messages", type=int, default=0, help="tool messages appended per turn, under the lease"
    )
    args = p.parse_args(argv)
    started = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mongogate-bench-") as tmp:
        engine = EmbeddedEngine(Path(tmp) / "engine")
        uri = engine.start()
        try:
            samples, trips = asyncio.run(run(uri, Path(tmp), args.rounds, args.baseline, args.tool_messages))
        finally:
            engine.stop()
    body = (
        f"Command: `{command_line('turn_trips.py', argv)}`  \n"
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, {os.cpu_count()} "
        f"cores; mcp {version('mcp')}, pymongo {version('pymongo')}, mongoeco {version('mongoeco')}; "
        f"{started:%Y-%m-%d %H:%M} UTC; whole run {time.perf_counter() - t0:.0f} s; load average at the end "
        f"{', '.join(f'{x:.1f}' for x in os.getloadavg())}; {args.rounds} rounds, {SESSIONS:,} sessions, "
        f"{SEEDED_MESSAGES} seeded messages per variant's session, {args.tool_messages} tool messages per "
        "turn. MCP's round trips are the library's "
        "(the same calls; tests/memory/test_turn_round_trips.py pins them).\n\n"
        + render(samples, trips)
        + "\n"
    )
    publish(args.section, body, not args.no_write)


if __name__ == "__main__":
    main()
