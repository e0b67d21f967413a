"""A flooding tenant beside a quiet one: the quiet tenant's latency with and without the flood.

One mongogate HTTP server (JWT auth, the demo's `find_orders` and `order_stats`) on the embedded
engine (its own thread, a temporary SQLite file). Tenant `flood` has `--flood-docs` orders and
runs `--flooders` concurrent MCP clients, each calling `order_stats` (an `$unwind` + per-day
`$group` over all its orders, a heavy but allowed call) back to back. Tenant `quiet` has 20
orders and one client calling `find_orders` (a small indexed find) back to back. Per round,
interleaved, each `--seconds` long:

- `alone`: the quiet client only (the baseline of the same run);
- `flood, no limit`: the flood beside it with `limits.tenant_concurrency` = 10,000 (off);
- `flood, limit N`: the same flood with `limits.tenant_concurrency` = N (`--limit`, default 4,
  the default setting), `tenant_queue` 32.

Reported: the quiet tenant's p50/p99 per phase (all rounds pooled), their ratio to `alone`, and
the flood's calls: done and refused `[busy]`. A shared 2-core machine: keep runs short.

    python benchmarks/fairness.py [--rounds 2] [--seconds 6] [--flooders 12] [--limit 4] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
from lib.results import write_section  # benchmarks/lib/results.py, beside this script
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pymongo import MongoClient

from mongogate.config import load_settings
from mongogate.demo import FIND_ORDERS, ORDER_STATS, ORDERS_INDEX
from mongogate.engine.embedded import EmbeddedEngine
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from mongogate.tools.registry import ToolRegistry

SECRET = "bench-secret-0123456789abcdef-0123456789abcdef"
HEAVY = [
    {"$unwind": "$tags"},
    {"$group": {"_id": {"$dateTrunc": {"date": "$createdAt", "unit": "day"}}, "n": {"$count": {}}}},
    {"$sort": {"n": -1}},
]


@contextlib.contextmanager
def unchecked_seeding() -> Iterator[None]:
    """Skip mongoeco's per-insert uniqueness scan while seeding (as benchmarks/memory.py does)."""
    from mongoeco.engines.sqlite import SQLiteEngine

    name = "_validate_document_against_unique_indexes"
    original = getattr(SQLiteEngine, name)
    setattr(SQLiteEngine, name, lambda *a, **k: None)
    try:
        yield
    finally:
        setattr(SQLiteEngine, name, original)


def seed(uri: str, db: str, flood_docs: int) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    docs: list[dict[str, Any]] = []
    for tenant, n in (("flood", flood_docs), ("quiet", 20)):
        for i in range(n):
            docs.append(
                {
                    "_id": f"{tenant}-{i}",
                    "userId": tenant,
                    "number": f"{tenant}-{i}",
                    "status": ("paid", "pending", "shipped")[i % 3],
                    "total": float(i % 97),
                    "createdAt": base + timedelta(hours=7 * i),
                    "tags": ["gift", "express", "bulk"][: 1 + i % 3],
                }
            )
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    with client, unchecked_seeding():
        client[db]["orders"].create_index(list(ORDERS_INDEX), name="tenant_created")
        client[db]["orders"].insert_many(docs)


def settings_for(uri: str, db: str, tmp: Path, limit: int) -> Any:
    return load_settings(
        None,
        database={"uri": uri, "name": db},
        server={"data_dir": str(tmp)},
        auth={"mode": "jwt", "jwt_secret": SECRET, "issuer": "bench", "audience": "mongogate"},
        limits={"tenant_concurrency": limit},
    )


async def client_loop(url: str, token: str, tool: str, args: dict[str, Any], until: float) -> list[Any]:
    """Call ``tool`` back to back until ``until``: (seconds, error text or None) per call."""
    out: list[Any] = []
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as hc,
        Client(streamable_http_client(url, http_client=hc)) as c,
    ):
        while time.monotonic() < until:
            t = time.perf_counter()
            r = await c.call_tool(tool, args)
            text = r.content[0].text if r.is_error else None  # type: ignore[union-attr]
            out.append((time.perf_counter() - t, text))
    return out


async def phase(url: str, settings: Any, flooders: int, seconds: float) -> tuple[list[float], int, int]:
    until = time.monotonic() + seconds
    quiet_token = mint_dev_token(settings.auth, tenant="quiet", ttl_s=3600)
    flood_token = mint_dev_token(settings.auth, tenant="flood", ttl_s=3600)
    quiet = asyncio.create_task(
        client_loop(url, quiet_token, "find_orders", {"filter": {"status": "paid"}, "limit": 5}, until)
    )
    floods = [
        asyncio.create_task(client_loop(url, flood_token, "order_stats", {"pipeline": HEAVY}, until))
        for _ in range(flooders)
    ]
    q = await quiet
    f = [call for task in floods for call in await task]
    bad = [text for _, text in q if text]
    if bad:
        raise RuntimeError(f"the quiet tenant's calls failed: {bad[:2]}")
    busy = sum(1 for _, text in f if text and text.startswith("[busy]"))
    other = [text for _, text in f if text and not text.startswith("[busy]")]
    if other:
        print(f"flood errors (not busy): {len(other)}, e.g. {other[0][:200]}", file=sys.stderr)
    return [s for s, _ in q], len(f) - busy, busy


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] * 1000


async def run(args: argparse.Namespace) -> dict[str, tuple[list[float], int, int]]:
    tmp = Path(tempfile.mkdtemp(prefix="mg-fair-"))
    engine = EmbeddedEngine(tmp / "engine")
    uri = engine.start()
    db = "fair"
    try:
        seed(uri, db, args.flood_docs)
        phases = {"alone": 10_000, "flood, no limit": 10_000, f"flood, limit {args.limit}": args.limit}
        pooled: dict[str, tuple[list[float], int, int]] = {name: ([], 0, 0) for name in phases}
        for _ in range(args.rounds):
            for name, limit in phases.items():
                settings = settings_for(uri, db, tmp, limit)
                registry = ToolRegistry([FIND_ORDERS, ORDER_STATS], run_tools=False)
                with BackgroundHttpServer(build_server(settings, registry, transport="http")) as http:
                    n = 0 if name == "alone" else args.flooders
                    lat, done, busy = await phase(http.url, settings, n, args.seconds)
                    old = pooled[name]
                    pooled[name] = (old[0] + lat, old[1] + done, old[2] + busy)
        return pooled
    finally:
        engine.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--flooders", type=int, default=12)
    p.add_argument("--flood-docs", type=int, default=1500)
    p.add_argument("--limit", type=int, default=4)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    load0 = os.getloadavg()
    started = time.monotonic()
    pooled = asyncio.run(run(args))
    load1 = os.getloadavg()
    base50 = pct(pooled["alone"][0], 50)
    base99 = pct(pooled["alone"][0], 99)
    rows = []
    for name, (lat, done, busy) in pooled.items():
        p50, p99 = pct(lat, 50), pct(lat, 99)
        rows.append(
            f"| {name} | {len(lat)} | {p50:.0f} | {p99:.0f} | {p50 / base50:.2f}x | {p99 / base99:.2f}x "
            f"| {done} | {busy} |"
        )
    cmd = "python " + " ".join(shlex.quote(a) for a in ["benchmarks/fairness.py", *sys.argv[1:]])
    body = (
        f"Command: `{cmd}`  \n"
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores shared with other work (load average {load0[0]:.2f} at the start, "
        f"{load1[0]:.2f} at the end; absolute times move with it); whole run "
        f"{time.monotonic() - started:.0f} s; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n"
        f"One HTTP server on the embedded engine. `quiet` (20 orders) calls `find_orders` back to back "
        f"from one client; `flood` ({args.flood_docs} orders) runs {args.flooders} clients calling "
        f"`order_stats` ($unwind + per-day $group) back to back. {args.rounds} interleaved rounds of "
        f"{args.seconds:g} s per phase; quiet latencies pooled.\n\n"
        "| phase | quiet calls | quiet p50 ms | quiet p99 ms | p50 ÷ alone | p99 ÷ alone "
        "| flood calls done | flood [busy] |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n"
    )
    print(body)
    if not args.no_write:
        write_section("fairness", body)


if __name__ == "__main__":
    main()
