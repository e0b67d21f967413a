"""Benchmark the query-tool policy: how fast filters are checked, and what a query tool costs.

1. Filters checked per second by ``check_filter`` (the authority) for a typical and a large
   filter, next to validating the same arguments with ``jsonschema`` alone (the generated
   ``input_schema``), in the same run.
2. The whole ``run_query`` (check, scope, find, render, cap) against a direct pymongo ``find``
   with the same scoped filter, projection, sort and limit, on the embedded engine, as a ratio.

Results are printed as markdown and written to benchmarks/RESULTS.md under ``## policy``
(only that section is replaced).

    python benchmarks/policy.py [--seconds 1.0] [--docs 1000] [--queries 300] [--no-db] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from lib.results import RESULTS, write_section  # benchmarks/lib/results.py, beside this script

from mongogate.config import PolicySettings
from mongogate.demo import FIND_ORDERS
from mongogate.policy.execute import prepare, run_query
from mongogate.policy.filters import check_filter
from mongogate.policy.render import cap_documents, project, to_json
from mongogate.policy.schema import input_schema

SPEC = FIND_ORDERS
LIMITS = PolicySettings()
STATUSES = ["open", "paid", "shipped", "cancelled", "refunded"]

TYPICAL: dict[str, Any] = {
    "status": {"$in": ["paid", "shipped"]},
    "createdAt": {"$gte": "2024-05-01T00:00:00Z"},
}
# 12 $or branches, 158 values: close to the default max_nodes (200), about as large as filters get.
LARGE: dict[str, Any] = {
    "$or": [
        {
            "status": {"$in": [*STATUSES]},
            "total": {"$gte": 10 * i, "$lt": 10 * i + 25.5},
            "createdAt": {"$gte": f"2024-{1 + i % 12:02d}-01T00:00:00Z"},
        }
        for i in range(12)
    ]
}


def rate(fn: Callable[[], object], seconds: float, repeats: int = 5) -> float:
    """Calls per second: the median of ``repeats`` timed runs of about ``seconds`` each."""
    n = 1
    while True:  # calibrate
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if (elapsed := time.perf_counter() - t0) > 0.05:
            break
        n *= 2
    n = max(1, int(n * seconds / elapsed))
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates)


def bench_checks(seconds: float) -> list[dict[str, Any]]:
    schema = input_schema(SPEC, LIMITS)
    raw = Draft202012Validator(schema)
    rows = []
    for name, f in (("typical", TYPICAL), ("large", LARGE)):
        args = {"filter": f}
        assert raw.is_valid(args)
        check_filter(f, SPEC, LIMITS)
        check = rate(partial(check_filter, f, SPEC, LIMITS), seconds)
        js = rate(partial(raw.validate, args), seconds)
        rows.append({"filter": name, "check": check, "jsonschema": js})
    return rows


async def _bench_db(uri: str, docs: int, queries: int) -> list[dict[str, Any]]:
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, tz_aware=True)
    try:
        coll = client["bench_policy"]["orders"]
        await coll.drop()
        base = datetime(2024, 1, 1, tzinfo=UTC)
        tenants = [f"t{i}" for i in range(10)]
        await coll.insert_many(
            [
                {
                    "userId": tenants[i % len(tenants)],
                    "number": f"N-{i:06d}",
                    "status": STATUSES[(i // 10) % 5],  # every tenant gets every status
                    "total": round((i * 7.3) % 500, 2),
                    "createdAt": base + timedelta(hours=i * 5),
                    "note": "x" * 200,
                }
                for i in range(docs)
            ]
        )
        await coll.create_index([("userId", 1), ("createdAt", -1)])
        rows = []
        for name, f in (("typical", TYPICAL), ("large", LARGE)):
            args = {"filter": f, "limit": 20}
            q = prepare(SPEC, args, "t3", LIMITS)

            async def direct(q: Any = q) -> int:
                cursor = coll.find(
                    q.filter,
                    projection=q.projection,
                    sort=q.sort or None,
                    limit=q.limit + 1,
                    max_time_ms=2000,
                )
                return len(await cursor.to_list(None))

            async def tool(args: dict[str, Any] = args) -> int:
                return (await run_query(coll, SPEC, args, "t3", LIMITS)).returned

            for _ in range(20):  # warm up both paths
                await direct()
                await tool()
            t_direct, t_tool = [], []
            for _ in range(queries):  # interleaved, so drift hits both alike
                t0 = time.perf_counter()
                await direct()
                t1 = time.perf_counter()
                returned = await tool()
                t2 = time.perf_counter()
                t_direct.append(t1 - t0)
                t_tool.append(t2 - t1)
            raw = await coll.find(
                q.filter, projection=q.projection, sort=q.sort or None, limit=q.limit + 1
            ).to_list(None)
            cpu = rate(partial(_cpu_only, raw, args), 0.3)
            rows.append(
                {
                    "filter": name,
                    "returned": returned,
                    "direct_ms": statistics.median(t_direct) * 1000,
                    "tool_ms": statistics.median(t_tool) * 1000,
                    "cpu_us": 1e6 / cpu,
                }
            )
        await coll.drop()
        return rows
    finally:
        await client.close()


def _cpu_only(raw: list[dict[str, Any]], args: dict[str, Any]) -> int:
    """The tool's own work around ``find``: checks and scoping, then projection, rendering, byte cap."""
    q = prepare(SPEC, args, "t3", LIMITS)
    docs = [to_json(project(d, SPEC)) for d in raw[: q.limit]]
    return len(cap_documents(docs, LIMITS.max_response_bytes)[0])


def nodes(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(nodes(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(nodes(v) for v in value)
    return 1


def bench_db(docs: int, queries: int) -> list[dict[str, Any]]:
    from mongogate.db import EmbeddedEngine  # the engine on its own thread and loop, as in production

    with tempfile.TemporaryDirectory() as tmp:
        engine = EmbeddedEngine(Path(tmp))
        uri = engine.start()
        try:
            return asyncio.run(_bench_db(uri, docs, queries))
        finally:
            engine.stop()


def render(checks: list[dict[str, Any]], db: list[dict[str, Any]] | None, command: str, docs: int) -> str:
    def ver(pkg: str) -> str:
        try:
            return version(pkg)
        except Exception:
            return "n/a"

    lines = [
        f"Command: `{command}`  ",
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}; "
        f"jsonschema {ver('jsonschema')}, pymongo {ver('pymongo')}, mongoeco {ver('mongoeco')}; "
        f"{datetime.now(UTC).date().isoformat()}.",
        "",
        "Filters checked per second (median of 5 runs). `check_filter` is the policy walk (the",
        "authority: allowlist, types, bounds, conversion); `jsonschema` is `Draft202012Validator.validate`",
        "on the generated input schema, for comparison only: a query tool call no longer runs it (the walk",
        f"alone decides). Typical: 2 fields, {nodes(TYPICAL)} values in all. "
        f"Large: 12 `$or` branches, {nodes(LARGE)} values.",
        "",
        "| filter | check_filter /s | jsonschema /s | check_filter ÷ jsonschema |",
        "|---|---:|---:|---:|",
    ]
    for r in checks:
        lines.append(
            f"| {r['filter']} | {r['check']:,.0f} | {r['jsonschema']:,.0f} "
            f"| {r['check'] / r['jsonschema']:.2f}× |"
        )
    if db:
        lines += [
            "",
            "Whole query tool (`run_query`: check, scope, find, render, cap) vs a direct pymongo `find`",
            "with the same scoped filter, projection, sort and limit+1, on the embedded engine",
            f"({docs} orders, 10 tenants, index on userId+createdAt, limit 20);",
            "median per call, interleaved.",
            "",
            "`policy CPU µs` is the tool's own work alone (checks, scoping, projection, rendering, byte cap)",
            "timed without the database: what the tool adds on any MongoDB, however fast.",
            "",
            "| filter | returned | direct find ms | run_query ms | overhead ms | ratio | policy CPU µs |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in db:
            lines.append(
                f"| {r['filter']} | {r['returned']} | {r['direct_ms']:.3f} | {r['tool_ms']:.3f} "
                f"| {r['tool_ms'] - r['direct_ms']:.3f} | {r['tool_ms'] / r['direct_ms']:.2f}× "
                f"| {r['cpu_us']:.0f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=1.0, help="time per rate measurement (default 1.0)")
    p.add_argument("--docs", type=int, default=1000, help="orders seeded for the query benchmark")
    p.add_argument("--queries", type=int, default=300, help="timed calls per path and filter")
    p.add_argument("--no-db", action="store_true", help="skip the embedded-engine query benchmark")
    p.add_argument("--no-write", action="store_true", help=f"print only; do not update {RESULTS.name}")
    args = p.parse_args(argv)
    checks = bench_checks(args.seconds)
    db = None if args.no_db else bench_db(args.docs, args.queries)
    command = "python benchmarks/policy.py" + "".join(f" {shlex.quote(a)}" for a in (argv or sys.argv[1:]))
    body = render(checks, db, command, args.docs)
    print(body)
    if not args.no_write:
        write_section("policy", body)
        print(f"written to {RESULTS} (## policy)")


if __name__ == "__main__":
    main()
