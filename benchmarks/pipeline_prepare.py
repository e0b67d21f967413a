"""The CPU of preparing one call (argument checks, the walk, tenant scoping, driver options),
against an older mongogate (a git ref), interleaved.

What changed in the one query pipeline (issue 21 §1) runs here and nowhere else on the hot path:
the spec classes, the scope (tenant, projection, hint, options). Each round times both versions
in their own interpreter, one after the other (the order alternates), so load and drift hit
both alike; the table gives the median per call and the ratio to the baseline.

    python benchmarks/pipeline_prepare.py [--baseline-ref main] [--rounds 7] [--calls 20000] [--no-write]
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from lib.results import command_line, parser, publish  # benchmarks/lib/results.py, beside this script

HERE = Path(__file__).resolve().parent
#: timed in the child: one find call (with count) and one aggregate call of the demo's tools
CHILD = r"""
import json, sys, time
from mongogate.config import PolicySettings
from mongogate.demo import FIND_ORDERS, ORDER_STATS
from mongogate.policy.aggregate_run import prepare_pipeline
from mongogate.policy.execute import prepare

LIMITS = PolicySettings()
FIND = {"filter": {"status": {"$in": ["paid", "shipped"]}, "createdAt": {"$gte": "2024-02-01T00:00:00Z"}},
        "limit": 20, "count": True}
AGG = {"pipeline": [{"$match": {"status": "paid"}},
                    {"$group": {"_id": "$status", "n": {"$count": {}}, "total": {"$sum": "$total"}}},
                    {"$sort": {"total": -1}}], "limit": 10}
calls = int(sys.argv[1])
out = {}
CASES = (("find", prepare, FIND_ORDERS, FIND), ("aggregate", prepare_pipeline, ORDER_STATS, AGG))
for name, fn, spec, args in CASES:
    for _ in range(200):
        fn(spec, args, "t3", LIMITS)
    t0 = time.process_time()
    for _ in range(calls):
        fn(spec, args, "t3", LIMITS)
    out[name] = (time.process_time() - t0) / calls * 1e6
print(json.dumps(out))
"""


def run_child(src: Path, calls: int) -> dict[str, float]:
    env = os.environ | {"PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(calls)], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--baseline-ref", default="main", help="the older mongogate (default main)")
    p.add_argument("--rounds", type=int, default=7, help="rounds of both versions (default 7)")
    p.add_argument("--calls", type=int, default=20000, help="calls of each kind per round (default 20000)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        old = Path(d)
        git = ["git", "-C", str(HERE.parent), "archive", args.baseline_ref, "src"]
        archive = subprocess.run(git, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        versions = {"this tree": HERE.parent / "src", f"mongogate@{args.baseline_ref}": old / "src"}
        times: dict[str, dict[str, list[float]]] = {v: {"find": [], "aggregate": []} for v in versions}
        for r in range(args.rounds):
            order = list(versions) if r % 2 == 0 else list(reversed(versions))
            for v in order:
                for kind, us in run_child(versions[v], args.calls).items():
                    times[v][kind].append(us)
    base = f"mongogate@{args.baseline_ref}"
    rows = ["| version | find µs/call | ratio | aggregate µs/call | ratio |", "|---|---:|---:|---:|---:|"]
    for v, kinds in times.items():
        f, a = statistics.median(kinds["find"]), statistics.median(kinds["aggregate"])
        fb, ab = statistics.median(times[base]["find"]), statistics.median(times[base]["aggregate"])
        rows.append(f"| {v} | {f:.1f} | {f / fb:.3f}x | {a:.1f} | {a / ab:.3f}x |")
    command = command_line("pipeline_prepare.py", argv)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    body = "\n".join(
        [
            f"Command: `{command}`  ",
            f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
            f"{os.cpu_count()} cores; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; load average at the end "
            f"{load} (a shared machine: CPU time per call, medians of {args.rounds} interleaved rounds).",
            "",
            "`prepare` of one `find_orders` call (a `$in` and a date range, limit 20, `count: true`) and",
            "`prepare_pipeline` of one `order_stats` call (`$match`, `$group` with `$count` and `$sum`,",
            f"`$sort`): the checks, the tenant scope and the driver options, {args.calls} calls of each",
            "per round, each version in its own interpreter.",
            "",
            *rows,
            "",
        ]
    )
    publish("pipeline prepare", body, write=not args.no_write)


if __name__ == "__main__":
    main()
