"""A hostile tenant beside a quiet one (issue 36 item 4): the quiet tenant's recall, search_messages
and append p50 alone and beside each hostile pattern, in the same run, with the server's RSS.

    .venv/bin/python benchmarks/hostile_tenant.py [--rounds 8] [--no-write]

One HTTP server (`BackgroundHttpServer`, JWT auth, default limits) on the embedded engine, in this
process: its RSS is this process's (`/proc/self/status` VmRSS sampled every 50 ms, and VmHWM).
Tenant `quiet` holds 20 memories and a session of 20 messages; one client calls recall,
search_messages and append in turn. Phases, each `--rounds` quiet rounds:

- `alone`: nobody else;
- `huge messages then search`: tenant `evil` appends twelve 256 KiB messages
  (`memory.max_message_bytes` raised to 256 KiB, as the issue's attack), then searches its
  messages back to back from two clients;
- `flood at the tenant limit`: `evil` runs 12 clients calling recall back to back (the tenant
  limit, `limits.tenant_concurrency` 4, refuses the rest `[busy]`);
- `bulk import`: `evil` appends 300 messages as fast as 4 clients can, while the quiet tenant runs.

Not measured here: listen streams on the 2026-07-28 revision (issue 36 item 2, not in this branch).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
from lib.results import write_section  # benchmarks/lib/results.py, beside this script
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mongogate.config import load_settings
from mongogate.engine.embedded import EmbeddedEngine
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer

SECRET = "bench-secret-0123456789abcdef-0123456789abcdef"


def rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            k, v = line.split(":")
            out[k] = int(v.split()[0]) / 1024
    return out["VmRSS"], out["VmHWM"]


@contextlib.asynccontextmanager
async def client(url: str, settings: Any, tenant: str) -> AsyncIterator[Client]:
    token = mint_dev_token(settings.auth, tenant=tenant, subject=f"{tenant}-agent", ttl_s=3600)
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=600) as hc,
        Client(streamable_http_client(url, http_client=hc)) as c,
    ):
        yield c


async def quiet_rounds(c: Client, sid: str, rounds: int, tag: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"recall": [], "search_messages": [], "append": []}
    for i in range(rounds):
        for name, args in (
            ("recall", {"query": "where is the spare key?"}),
            ("search_messages", {"query": "spare key"}),
            (
                "append",
                {"session_id": sid, "turn_id": f"{tag}{i}", "role": "user", "content": f"note {tag} {i}"},
            ),
        ):
            t = time.perf_counter()
            r = await c.call_tool(name, args)
            if r.is_error:
                raise RuntimeError(f"quiet {name}: {r.content}")
            out[name].append((time.perf_counter() - t) * 1000)
    return out


async def evil_huge(c: Client, stop: asyncio.Event) -> int:
    sid = (await c.call_tool("create_session", {})).structured_content["session_id"]
    body = " ".join(f"w{i % 5000}x" for i in range(40_000))
    for n in range(12):
        text = f"huge {n} {body}"[: 256 * 1024 - 20] + f" needle{n}"
        await c.call_tool("append", {"session_id": sid, "turn_id": f"h{n}", "role": "user", "content": text})
    calls = 0
    while not stop.is_set():
        await c.call_tool("search_messages", {"query": "needle7 huge"})
        calls += 1
    return calls


async def evil_loop(c: Client, stop: asyncio.Event, tool: str, args: dict[str, Any]) -> int:
    calls = 0
    while not stop.is_set():
        await c.call_tool(tool, args)
        calls += 1
    return calls


async def evil_import(c: Client, stop: asyncio.Event, who: int) -> int:
    sid = (await c.call_tool("create_session", {})).structured_content["session_id"]
    calls = 0
    while not stop.is_set() and calls < 75:
        text = f"imported line {who}-{calls}: " + "lorem ipsum " * 200
        await c.call_tool(
            "append", {"session_id": sid, "turn_id": f"i{calls}", "role": "user", "content": text}
        )
        calls += 1
    return calls


async def phase(
    url: str, settings: Any, name: str, rounds: int, sid: str, qc: Client
) -> tuple[Any, int, float]:
    stop = asyncio.Event()
    peak = [rss_mib()[0]]

    async def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mib()[0])
            await asyncio.sleep(0.05)

    async with contextlib.AsyncExitStack() as stack:
        evil = [
            await stack.enter_async_context(client(url, settings, "evil"))
            for _ in range(12 if "flood" in name else 4)
        ]
        tasks: list[asyncio.Task[int]] = []
        if name.startswith("huge"):
            tasks = [asyncio.create_task(evil_huge(evil[0], stop))]
            await asyncio.sleep(0)
        elif name.startswith("flood"):
            tasks = [
                asyncio.create_task(evil_loop(e, stop, "recall", {"query": "anything at all"})) for e in evil
            ]
        elif name.startswith("bulk"):
            tasks = [asyncio.create_task(evil_import(e, stop, i)) for i, e in enumerate(evil)]
        sampler = asyncio.create_task(sample())
        times = await quiet_rounds(qc, sid, rounds, name[:4])
        stop.set()
        calls = 0
        for t in tasks:
            with contextlib.suppress(Exception):
                calls += await t
        await sampler
    return times, calls, peak[0]


async def run(rounds: int) -> tuple[list[str], float, float]:
    tmp = Path(tempfile.mkdtemp(prefix="mg-hostile-"))
    engine = EmbeddedEngine(tmp / "engine")
    uri = engine.start()
    settings = load_settings(
        None,
        database={"uri": uri, "name": "hostile"},
        server={"data_dir": str(tmp)},
        auth={"mode": "jwt", "jwt_secret": SECRET, "issuer": "bench", "audience": "mongogate"},
        memory={"max_message_bytes": 256 * 1024},
    )
    rows: list[str] = []
    try:
        with BackgroundHttpServer(build_server(settings, transport="http")) as http:
            async with client(http.url, settings, "quiet") as qc:
                for i in range(20):
                    await qc.call_tool("remember", {"text": f"Note {i}: the spare key is under pot {i}."})
                sid = (await qc.call_tool("create_session", {})).structured_content["session_id"]
                for i in range(20):
                    args = {
                        "session_id": sid,
                        "turn_id": f"s{i}",
                        "role": "user",
                        "content": f"the spare key {i}",
                    }
                    await qc.call_tool("append", args)
                await quiet_rounds(qc, sid, 2, "warm")
                start_rss = rss_mib()[0]
                base: dict[str, float] = {}
                for name in (
                    "alone",
                    "huge messages then search",
                    "flood at the tenant limit",
                    "bulk import",
                ):
                    times, calls, peak = await phase(http.url, settings, name, rounds, sid, qc)
                    p50 = {k: statistics.median(v) for k, v in times.items()}
                    if name == "alone":
                        base = p50
                    cells = " | ".join(
                        f"{p50[k]:.0f} ({p50[k] / base[k]:.2f}x)"
                        for k in ("recall", "search_messages", "append")
                    )
                    rows.append(f"| {name} | {cells} | {calls} | {peak:.0f} (+{peak - start_rss:.0f}) |")
    finally:
        engine.stop()
    return rows, start_rss, rss_mib()[1]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    load0 = os.getloadavg()
    started = time.monotonic()
    rows, start_rss, hwm = asyncio.run(run(args.rounds))
    load1 = os.getloadavg()
    cmd = " ".join(["benchmarks/hostile_tenant.py", *sys.argv[1:]])
    body = (
        f"Command: `.venv/bin/python {cmd}`  \n"
        f"Python {platform.python_version()}, {os.cpu_count()} cores shared with other work; load average "
        f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end; "
        f"whole run {time.monotonic() - started:.0f} s; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. One HTTP server and the engine in this "
        f"process (RSS is theirs and the clients'); {args.rounds} quiet rounds per phase, phases in turn.\n\n"
        "| phase | quiet recall p50 ms (÷ alone) | quiet search_messages p50 | quiet append p50 "
        "| hostile calls done | peak RSS MiB (over the start) |\n|---|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + f"\n\nRSS at the start of the phases {start_rss:.0f} MiB; "
        f"the process's high-water mark {hwm:.0f} MiB. "
        "Listen streams (2026-07-28) are not measured: item 2 of the issue is not on this branch.\n"
    )
    print(body)
    if not args.no_write:
        write_section("hostile tenant (issue 36 item 4)", body)


if __name__ == "__main__":
    main()
