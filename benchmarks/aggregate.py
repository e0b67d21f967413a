"""Benchmark the aggregation tool: how fast pipelines are checked, and what a call costs.

1. Pipelines checked per second by ``check_pipeline`` (the authority) for a typical and a large
   pipeline, next to validating the same arguments with ``jsonschema`` alone (the generated
   ``aggregate_input_schema``), in the same run.
2. The whole ``run_pipeline`` (check, scope, aggregate, render, cap) against a direct pymongo
   ``aggregate`` of the same scoped pipeline with the same options, on the embedded engine,
   interleaved, as a ratio; and the tool's own CPU per call without the database.

Results are printed as markdown and written to benchmarks/RESULTS.md under ``## aggregate``.

    python benchmarks/aggregate.py [--seconds 1.0] [--docs 1000] [--queries 200] [--no-db] [--no-write]
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
from mongogate.demo import ORDER_STATS
from mongogate.policy.aggregate_run import prepare_pipeline, render_output, run_pipeline
from mongogate.policy.aggregate_schema import aggregate_input_schema
from mongogate.policy.aggregate_walk import check_pipeline
from mongogate.policy.render import cap_documents

SPEC = ORDER_STATS
LIMITS = PolicySettings()
STATUSES = ["pending", "paid", "shipped", "cancelled"]
MONTH = {"$dateTrunc": {"date": "$createdAt", "unit": "month"}}

#: "orders and total per status this year"
TYPICAL: list[dict[str, Any]] = [
    {"$match": {"createdAt": {"$gte": "2024-01-01T00:00:00Z"}}},
    {"$group": {"_id": "$status", "orders": {"$count": {}}, "total": {"$sum": "$total"}}},
    {"$sort": {"total": -1}},
]
#: per status and month, five accumulators, a filter before and after the group, 7 stages
LARGE: list[dict[str, Any]] = [
    {
        "$match": {
            "$or": [
                {"status": {"$in": ["paid", "shipped"]}, "total": {"$gte": 10}},
                {"createdAt": {"$gte": "2024-03-01T00:00:00Z", "$lt": "2024-09-01T00:00:00Z"}},
            ]
        }
    },
    {"$unwind": {"path": "$tags", "preserveNullAndEmptyArrays": True}},
    {
        "$group": {
            "_id": {"s": "$status", "m": MONTH},
            "n": {"$count": {}},
            "total": {"$sum": "$total"},
            "avg": {"$avg": "$total"},
            "first": {"$min": "$createdAt"},
            "last": {"$max": "$createdAt"},
        }
    },
    {"$match": {"n": {"$gte": 2}}},
    {"$sort": {"total": -1}},
    {"$project": {"avg": 0}},
    {"$limit": 30},
]


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
    raw = Draft202012Validator(aggregate_input_schema(SPEC))
    rows = []
    for name, pipeline in (("typical", TYPICAL), ("large", LARGE)):
        args = {"pipeline": pipeline}
        assert raw.is_valid(args)
        check_pipeline(pipeline, SPEC, LIMITS)
        check = rate(partial(check_pipeline, pipeline, SPEC, LIMITS), seconds)
        js = rate(partial(raw.validate, args), seconds)
        rows.append({"pipeline": name, "check": check, "jsonschema": js})
    return rows


async def _bench_db(uri: str, docs: int, queries: int) -> list[dict[str, Any]]:
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, tz_aware=True)
    try:
        coll = client["bench_aggregate"]["orders"]
        await coll.drop()
        base = datetime(2024, 1, 1, tzinfo=UTC)
        tenants = [f"t{i}" for i in range(10)]
        await coll.insert_many(
            [
                {
                    "userId": tenants[i % len(tenants)],
                    "number": f"N-{i:06d}",
                    "status": STATUSES[(i // 10) % 4],
                    "total": round((i * 7.25) % 500, 2),
                    "createdAt": base + timedelta(hours=i * 5),
                    "tags": ["gift", "bulk"][: i % 3],
                    "internalNote": "x" * 200,
                }
                for i in range(docs)
            ]
        )
        await coll.create_index([("userId", 1), ("createdAt", -1)])
        rows = []
        for name, pipeline in (("typical", TYPICAL), ("large", LARGE)):
            args = {"pipeline": pipeline, "limit": 50}
            q = prepare_pipeline(SPEC, args, "t3", LIMITS)
            options = q.scope.options(allowDiskUse=False)

            async def direct(q: Any = q, options: dict[str, Any] = options) -> int:
                cursor = await coll.aggregate(q.pipeline, **options)
                return len(await cursor.to_list(None))

            async def tool(args: dict[str, Any] = args) -> int:
                return (await run_pipeline(coll, SPEC, args, "t3", LIMITS)).returned

            for _ in range(10):  # warm up both paths
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
            raw = await (await coll.aggregate(q.pipeline, **options)).to_list(None)
            cpu = rate(partial(_cpu_only, raw, args), 0.3)
            rows.append(
                {
                    "pipeline": name,
                    "returned": returned,
                    "round_trips": 1 if q.probe is None else 2,
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
    """The tool's own work around ``aggregate``: check and scope, then re-projection, render, cap."""
    q = prepare_pipeline(SPEC, args, "t3", LIMITS)
    docs = [render_output(d, q.output) for d in raw[: q.limit]]
    return len(cap_documents(docs, LIMITS.max_response_bytes)[0])


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
        f"{datetime.now(UTC).date().isoformat()}. The machine was shared with other engineers' runs:",
        "absolute figures are noisy, the ratios (same run, interleaved) are what to read.",
        "",
        "Pipelines checked per second (median of 5 runs). `check_pipeline` is the walk (the authority:",
        "stages, field paths, accumulators, the filter policy in every `$match`, bounds, conversion);",
        "`jsonschema` validates the same arguments against the generated input schema, which can only",
        f"say which stage names are allowed. Typical: {len(TYPICAL)} stages (orders and total per status",
        f"this year). Large: {len(LARGE)} stages ($or match, unwind, group by status and month with five",
        "accumulators, match, sort, project, limit).",
        "",
        "| pipeline | check_pipeline /s | jsonschema /s | check_pipeline ÷ jsonschema |",
        "|---|---:|---:|---:|",
    ]
    for r in checks:
        lines.append(
            f"| {r['pipeline']} | {r['check']:,.0f} | {r['jsonschema']:,.0f} "
            f"| {r['check'] / r['jsonschema']:.2f}× |"
        )
    if db:
        lines += [
            "",
            "Whole aggregation tool (`run_pipeline`: check, scope, aggregate, render, cap) vs a direct",
            "pymongo `aggregate` of the same scoped pipeline (tenant `$match`, `max_groups` limit, output",
            "`$project`, limit+1, hint, maxTimeMS, allowDiskUse false) on the embedded engine",
            f"({docs} orders, 10 tenants, index on userId+createdAt, limit 50); median per call,",
            "interleaved.",
            "`round trips` is what the tool sends: a second one (the `max_groups` probe) only when stages",
            "after the first group could drop groups. `tool CPU µs` is the tool's own work without the",
            "database (check, scope, re-projection, rendering, byte cap).",
            "",
            "| pipeline | returned | round trips | direct ms | run_pipeline ms | ratio | tool CPU µs |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in db:
            lines.append(
                f"| {r['pipeline']} | {r['returned']} | {r['round_trips']} | {r['direct_ms']:.3f} "
                f"| {r['tool_ms']:.3f} | {r['tool_ms'] / r['direct_ms']:.2f}× | {r['cpu_us']:.0f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=1.0, help="time per rate measurement (default 1.0)")
    p.add_argument("--docs", type=int, default=1000, help="orders seeded for the database benchmark")
    p.add_argument("--queries", type=int, default=200, help="timed calls per path and pipeline")
    p.add_argument("--no-db", action="store_true", help="skip the embedded-engine benchmark")
    p.add_argument("--no-write", action="store_true", help=f"print only; do not update {RESULTS.name}")
    args = p.parse_args(argv)
    checks = bench_checks(args.seconds)
    db = None if args.no_db else bench_db(args.docs, args.queries)
    command = "python benchmarks/aggregate.py" + "".join(f" {shlex.quote(a)}" for a in (argv or sys.argv[1:]))
    body = render(checks, db, command, args.docs)
    print(body)
    if not args.no_write:
        write_section("aggregate", body)
        print(f"written to {RESULTS} (## aggregate)")


if __name__ == "__main__":
    main()
