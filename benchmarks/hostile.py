"""Benchmark what hostile arguments cost the server over real HTTP, next to an ordinary query.

For each hostile request body (the 3.8 MB `sort` of issue 12 and its cousins on other tools),
the CPU time of one refused request (client and server, one process: `time.process_time`),
the CPU the SDK's JSON parser alone would spend on that body (what the body-density check
avoids), and, as the baseline measured in the same run, an ordinary `find_orders` query.

Results are printed as markdown and written to benchmarks/RESULTS.md under ``## hostile``.

    python benchmarks/hostile.py [--reps 5] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import shlex
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx2
import pydantic_core
from lib.mcp_messages import INITIALIZE, INITIALIZED  # benchmarks/lib/mcp_messages.py, beside this script
from lib.results import write_section  # benchmarks/lib/results.py, beside this script

from mongogate.config import load_settings
from mongogate.db import EmbeddedEngine
from mongogate.demo import FIND_ORDERS, seed_demo
from mongogate.server.app import build_server
from mongogate.server.http import BackgroundHttpServer
from mongogate.tools.registry import ToolRegistry

HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-06-18",
}
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("sort, 330,000 keys", "find_orders", {"filter": {}, "sort": {f"k{i}": 1 for i in range(330_000)}}),
    ("metadata, 200,000 keys", "create_session", {"metadata": {f"m{i}": i for i in range(200_000)}}),
    ("filter, $or of 190,000", "find_orders", {"filter": {"$or": [{"status": "paid"}] * 190_000}}),
    (
        "sort, 99,000 keys (under the token cap)",
        "find_orders",
        {"filter": {}, "sort": {f"k{i}": 1 for i in range(99_000)}},
    ),
    ("metadata, 30,000 keys", "create_session", {"metadata": {f"m{i}": i for i in range(30_000)}}),
    (
        "content, 3 MB string",
        "append",
        {"session_id": "s", "turn_id": "t", "role": "user", "content": "x" * 3_000_000},
    ),
]
BASELINE = ("find_orders", {"filter": {"status": "paid"}})


def body(rid: int, tool: str, arguments: dict[str, Any]) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return json.dumps(message, separators=(",", ":")).encode()


def parse_cpu(raw: bytes, reps: int) -> float:
    samples = []
    for _ in range(reps):
        started = time.process_time()
        pydantic_core.from_json(raw)
        samples.append(time.process_time() - started)
    return statistics.median(samples) * 1000


async def measure(url: str, reps: int) -> tuple[float, list[tuple[str, float, float, float, str]]]:
    rid = 100
    async with httpx2.AsyncClient(timeout=120) as hc:
        r = await hc.post(url, json=INITIALIZE, headers=HEADERS)
        headers = HEADERS | {"Mcp-Session-Id": r.headers["mcp-session-id"]}
        await hc.post(url, json=INITIALIZED, headers=headers)

        async def cpu(tool: str, arguments: dict[str, Any]) -> tuple[float, str]:
            nonlocal rid
            samples, outcome = [], ""
            for _ in range(reps + 1):  # the first is a warm-up
                rid += 1
                raw = body(rid, tool, arguments)
                started = time.process_time()
                r = await hc.post(url, content=raw, headers=headers)
                samples.append(time.process_time() - started)
                outcome = (
                    "413"
                    if r.status_code == 413
                    else ("invalid_input" if "[invalid_input]" in r.text else "ok")
                )
            return statistics.median(samples[1:]) * 1000, outcome

        base, _ = await cpu(*BASELINE)
        rows = []
        for label, tool, arguments in CASES:
            spent, outcome = await cpu(tool, arguments)
            raw = body(1, tool, arguments)
            rows.append((label, len(raw) / 1e6, spent, parse_cpu(raw, reps), outcome))
        return base, [(label, mb, spent, parse, outcome) for label, mb, spent, parse, outcome in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        engine = EmbeddedEngine(Path(tmp) / "engine")
        uri = engine.start()
        try:
            settings = load_settings(
                None,
                database={"uri": uri, "name": "bench_hostile"},
                server={"data_dir": str(Path(tmp) / "data")},
                auth={"mode": "none", "tenant": "acme"},
                audit={"path": str(Path(tmp) / "audit.jsonl")},
            )
            registry = ToolRegistry([FIND_ORDERS])
            registry.on_startup(seed_demo)
            server = build_server(settings, registry, transport="http", insecure_no_auth=True)
            with BackgroundHttpServer(server, settings=settings.server) as http:
                base, rows = asyncio.run(measure(http.url, args.reps))
        finally:
            engine.stop()
    command = shlex.join([".venv/bin/python", "benchmarks/hostile.py", *sys.argv[1:]])
    where = f"Python {platform.python_version()} on {platform.system()} {platform.machine()}"
    versions = f"mcp {version('mcp')}, uvicorn {version('uvicorn')}"
    when = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; whole run {time.monotonic() - started:.0f} s"
    lines = [
        f"Command: `{command}`.",
        f"{where}; {versions}; {when}.",
        "",
        "CPU per request in ms (median of the repetitions after a warm-up; client and server in one process, "
        f"over HTTP, default settings). Baseline, an ordinary `find_orders` query: **{base:.1f} ms**. "
        "`parse alone` is what the SDK's JSON parser would spend on the same body, on the event loop, "
        "if the body-density check (`server.max_json_tokens`) did not refuse it first "
        "(before issue 12's fixes, the 3.8 MB sort took 7-15 s of CPU in schema validation).",
        "",
        "| request | body | refused as | CPU | ÷ baseline | parse alone |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for label, mb, spent, parse, outcome in rows:
        lines.append(
            f"| {label} | {mb:.2f} MB | {outcome} | {spent:.1f} | {spent / base:.1f}x | {parse:.1f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_write:
        write_section("hostile", text)


if __name__ == "__main__":
    main()
