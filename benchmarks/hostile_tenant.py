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
  messages back to back from one client;
- `flood at the tenant limit`: `evil` runs 12 clients calling recall back to back (the tenant
  limit, `limits.tenant_concurrency` 4, refuses the rest `[busy]`);
- `bulk import`: `evil` appends 300 messages as fast as 4 clients can, while the quiet tenant runs;
- `listen streams`: `evil` (one token) tries to hold 250 `subscriptions/listen` streams on
  protocol 2026-07-28: 250 raw HTTP POSTs at once, each response kept open by its client until
  the phase ends (as an attacker holds them), and an SDK client calling `client.listen(...)` back
  to back (a client whose connection the guards close is replaced by a new one). The server
  serves no listen (mongogate publishes no events), so none becomes a stream;
  a wave of 250 connections from one address meets, in order, the per-address limit on unfinished
  request heads (`server.max_pending_heads_per_address` [64]: the oldest is closed, 429 text or a
  dropped connection), the principal's requests in flight without a session
  (`server.max_sessions_per_principal` [32], counted before the body: 429, JSON-RPC -32000
  `[busy]`), and the listen itself (404, JSON-RPC -32601 "not offered"); the connections left are
  idle ones, closed to make room at `server.max_connections` [200]. The section counts the
  answers by status and code, the streams held open at once, and the server's open connections.

The quiet tenant connects from 127.0.0.2 and `evil` from 127.0.0.1, as two hosts would: the
unfinished-head limit is per client address by design. `--quiet-address 127.0.0.1` puts both on
one address (one NAT or proxy in front of both): then that limit is theirs together. On
2026-12-04 at load 2-3.5, one of nine such runs had a quiet call refused during the wave of 250
(the SDK's "Server returned an error response" for a non-JSON 429), the others did not.

Every quiet call must be answered (an error stops the run). The hostile clients share this
process's event loop and its 2 cores with the server and the quiet client, so a ratio is the
server's slowdown plus the clients' own work: an upper bound, not the server's alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from lib.results import write_section  # benchmarks/lib/results.py, beside this script
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mongogate.config import load_settings
from mongogate.engine.embedded import EmbeddedEngine
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer

SECRET = "bench-secret-0123456789abcdef-0123456789abcdef"
LISTENS = 250
MODERN = "2026-07-28"
PHASES = ("alone", "huge messages then search", "flood at the tenant limit", "bulk import", "listen streams")


def rss_mib() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MiB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            k, v = line.split(":")
            out[k] = int(v.split()[0]) / 1024
    return out["VmRSS"], out["VmHWM"]


@contextlib.asynccontextmanager
async def client(url: str, settings: Any, tenant: str, local: str | None = None) -> AsyncIterator[Client]:
    """An SDK client of `tenant`; `local` is the loopback address it connects from."""
    token = mint_dev_token(settings.auth, tenant=tenant, subject=f"{tenant}-agent", ttl_s=3600)
    transport = httpx2.AsyncHTTPTransport(local_address=local)
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=600, transport=transport
        ) as hc,
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


@dataclass
class ListenTally:
    """What the server did with `evil`'s listen attempts, and what it held meanwhile."""

    raw: Counter[str] = field(default_factory=Counter)  # "404 -32601", "503", "200 stream", ...
    sdk: Counter[str] = field(default_factory=Counter)  # "-32601", "stream", ...
    held: int = 0
    held_peak: int = 0
    conns_peak: int = 0
    reclaimed: int = 0  # idle keep-alive connections the server closed to make room

    def opened(self) -> None:
        self.held += 1
        self.held_peak = max(self.held_peak, self.held)


def listen_request(rid: int, token: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A raw 2026-07-28 `subscriptions/listen`: the envelope in `params._meta`, method in a header."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    params = {"notifications": {"toolsListChanged": True, "resourcesListChanged": True}, "_meta": meta}
    body = {"jsonrpc": "2.0", "id": rid, "method": "subscriptions/listen", "params": params}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "subscriptions/listen",
        "Authorization": f"Bearer {token}",
    }
    return body, headers


async def raw_listen(
    hc: httpx2.AsyncClient, url: str, token: str, rid: int, stop: asyncio.Event, tally: ListenTally
) -> None:
    """One listen attempt, its response held open until the phase ends, whatever it was."""
    body, headers = listen_request(rid, token)
    try:
        async with hc.stream("POST", url, json=body, headers=headers) as r:
            chunks = r.aiter_bytes()  # kept: leaving the loop would close the response
            first = await anext(chunks, b"")  # a stream's first frame, or a whole answer
            code = re.search(rb'"code":\s*(-?\d+)', first)
            if r.status_code == 200 and code is None:
                tally.raw["200 stream"] += 1
                tally.opened()
            else:
                what = code.group(1).decode() if code else r.headers.get("content-type", "").split(";")[0]
                tally.raw[f"{r.status_code} {what}"] += 1
            await stop.wait()
    except httpx2.HTTPError as e:
        tally.raw[type(e).__name__] += 1


async def listen_loop(c: Client, stop: asyncio.Event, tally: ListenTally) -> None:
    while not stop.is_set():
        try:
            async with c.listen(tools_list_changed=True, resources_list_changed=True):
                tally.sdk["stream"] += 1
                tally.opened()
                await stop.wait()
        except MCPError as e:
            tally.sdk[str(e.error.code)] += 1


async def sdk_listens(url: str, settings: Any, stop: asyncio.Event, tally: ListenTally) -> None:
    """The SDK's own `client.listen`, back to back; one that opens is held until the phase ends.

    Its own task and client: when the guards close the client's connection its transport fails,
    which ends the client (and whatever runs inside it); an attacker then connects again.
    """
    while not stop.is_set():
        try:
            async with client(url, settings, "evil") as c:
                await listen_loop(c, stop, tally)
        except Exception as e:
            while isinstance(e, ExceptionGroup):
                e = e.exceptions[0]
            tally.sdk[f"client lost: {type(e).__name__}"] += 1


async def evil_listen(url: str, settings: Any, stop: asyncio.Event, tally: ListenTally) -> int:
    token = mint_dev_token(settings.auth, tenant="evil", subject="evil-agent", ttl_s=3600)
    limits = httpx2.Limits(max_connections=LISTENS + 10, max_keepalive_connections=LISTENS + 10)
    async with httpx2.AsyncClient(timeout=600, limits=limits) as hc:
        sdk = asyncio.create_task(sdk_listens(url, settings, stop, tally))
        await asyncio.gather(*(raw_listen(hc, url, token, i, stop, tally) for i in range(LISTENS)))
        await sdk
    return LISTENS + sum(tally.sdk.values())


def start_hostile(
    name: str, evil: list[Client], stop: asyncio.Event, url: str, settings: Any, tally: ListenTally
) -> list[asyncio.Task[int]]:
    if name.startswith("huge"):
        return [asyncio.create_task(evil_huge(evil[0], stop))]
    if name.startswith("flood"):
        return [asyncio.create_task(evil_loop(e, stop, "recall", {"query": "anything at all"})) for e in evil]
    if name.startswith("bulk"):
        return [asyncio.create_task(evil_import(e, stop, i)) for i, e in enumerate(evil)]
    if name.startswith("listen"):
        return [asyncio.create_task(evil_listen(url, settings, stop, tally))]
    return []


async def phase(
    http: BackgroundHttpServer,
    settings: Any,
    name: str,
    rounds: int,
    sid: str,
    qc: Client,
    tally: ListenTally,
) -> tuple[Any, int, float]:
    stop = asyncio.Event()
    peak = [rss_mib()[0]]

    async def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mib()[0])
            tally.conns_peak = max(tally.conns_peak, http.open_connections)
            await asyncio.sleep(0.05)

    reclaimed = http.budget.reclaimed
    async with contextlib.AsyncExitStack() as stack:
        evil = [
            await stack.enter_async_context(client(http.url, settings, "evil"))
            for _ in range({"flood": 12, "listen": 0}.get(name.split()[0], 4))
        ]
        tasks = start_hostile(name, evil, stop, http.url, settings, tally)
        await asyncio.sleep(0)
        sampler = asyncio.create_task(sample())
        times = await quiet_rounds(qc, sid, rounds, name[:4])
        stop.set()
        calls = 0
        for t in tasks:
            with contextlib.suppress(Exception):
                calls += await t
        await sampler
    tally.reclaimed = http.budget.reclaimed - reclaimed
    return times, calls, peak[0]


@dataclass
class Run:
    rows: list[str]
    start_rss: float
    hwm: float
    p50: dict[str, dict[str, float]]
    peak_rss: dict[str, float]
    listens: ListenTally
    cap: int = 0  # server.max_sessions_per_principal
    max_connections: int = 0


async def seed(qc: Client) -> str:
    for i in range(20):
        await qc.call_tool("remember", {"text": f"Note {i}: the spare key is under pot {i}."})
    sid: str = (await qc.call_tool("create_session", {})).structured_content["session_id"]
    for i in range(20):
        args = {"session_id": sid, "turn_id": f"s{i}", "role": "user", "content": f"the spare key {i}"}
        await qc.call_tool("append", args)
    return sid


async def run(rounds: int, quiet_address: str) -> Run:
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
    out = Run([], 0.0, 0.0, {}, {}, ListenTally())
    out.cap, out.max_connections = settings.server.max_sessions_per_principal, settings.server.max_connections
    try:
        with BackgroundHttpServer(build_server(settings, transport="http"), settings=settings.server) as http:
            async with client(http.url, settings, "quiet", quiet_address) as qc:
                sid = await seed(qc)
                await quiet_rounds(qc, sid, 2, "warm")
                out.start_rss = rss_mib()[0]
                for name in PHASES:
                    tally = ListenTally()
                    times, calls, peak = await phase(http, settings, name, rounds, sid, qc, tally)
                    p50 = out.p50[name] = {k: statistics.median(v) for k, v in times.items()}
                    base = out.p50["alone"]
                    out.peak_rss[name] = peak
                    if name.startswith("listen"):
                        out.listens = tally
                    cells = " | ".join(
                        f"{p50[k]:.0f} ({p50[k] / base[k]:.2f}x)"
                        for k in ("recall", "search_messages", "append")
                    )
                    out.rows.append(
                        f"| {name} | {cells} | {calls} | {peak:.0f} (+{peak - out.start_rss:.0f}) |"
                    )
    finally:
        engine.stop()
    out.hwm = rss_mib()[1]
    return out


# What each answer is, by status and JSON-RPC code (or content type), for the section's text.
LEGEND = {
    "404 -32601": "listen not offered",
    "-32601": "listen not offered",
    "429 -32000": "[busy]: the principal's 32 requests in flight without a session",
    "-32000": "[busy]: the principal's requests in flight",
    "429 text/plain": "server.max_pending_heads_per_address, the oldest unfinished head closed",
    "503 text/plain": "server.max_connections",
    "ReadError": "connection closed by the server before an answer",
    "client lost: ReadError": "its connection closed by the server; a new client connects",
    "client lost: ListenNotSupportedError": "that client had negotiated a revision before 2026-07-28",
}


def counts(c: Counter[str]) -> str:
    return (
        ", ".join(f"{k} ({LEGEND[k]}) x{n}" if k in LEGEND else f"{k} x{n}" for k, n in c.most_common())
        or "none"
    )


def verdicts(r: Run) -> str:
    """The issue's two Done-when bounds this benchmark can speak to, as this run saw them."""
    huge = "huge messages then search"
    rise = r.peak_rss[huge] - r.start_rss
    ratio = r.p50[huge]["recall"] / r.p50["alone"]["recall"]
    t = r.listens
    held, cap = t.held_peak, r.cap
    return (
        f"Listen streams: {LISTENS} raw POSTs answered {counts(t.raw)}; the SDK's `client.listen` "
        f"answered {counts(t.sdk)}; streams held open at once {held} (per-principal cap "
        f"`server.max_sessions_per_principal` = {cap}); the server's open connections peaked at "
        f"{t.conns_peak} (`server.max_connections` = {r.max_connections}; {t.reclaimed} idle ones closed to "
        "make room); "
        "every quiet call in the phase was answered.\n\n"
        f"Done-when, this run: twelve 256 KiB messages then searches raised the peak RSS by {rise:.0f} MiB "
        f"({'well under' if rise < 384 else 'NOT well under'} 768 MiB, read as under half of it; the "
        f"high-water mark, sampled by the kernel over the whole run, is {r.hwm - r.start_rss:.0f} MiB over "
        "the start) "
        f"and left the quiet recall at "
        f"{ratio:.2f}x its p50 alone ({'within' if ratio <= 5 else 'NOT within'} 5x): "
        f"{'holds' if rise < 384 and ratio <= 5 else 'does not hold'}. One tenant trying {LISTENS} listen "
        f"streams left the other tenant's calls answered and held {held} streams "
        f"({'at most' if held <= cap else 'MORE than'} its cap of {cap}): "
        f"{'holds' if held <= cap else 'does not hold'}.\n"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--no-write", action="store_true")
    p.add_argument(
        "--quiet-address",
        default="127.0.0.2",
        help="loopback address the quiet tenant connects from (`evil` uses 127.0.0.1)",
    )
    args = p.parse_args()
    load0 = os.getloadavg()
    started = time.monotonic()
    r = asyncio.run(run(args.rounds, args.quiet_address))
    load1 = os.getloadavg()
    cmd = " ".join(["benchmarks/hostile_tenant.py", *sys.argv[1:]])
    body = (
        f"Command: `.venv/bin/python {cmd}`  \n"
        f"Python {platform.python_version()}, {os.cpu_count()} cores shared with other work; load average "
        f"{load0[0]:.2f} at the start, {load1[0]:.2f} at the end; "
        f"whole run {time.monotonic() - started:.0f} s; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. One HTTP server and the engine in this "
        f"process (RSS is theirs and the clients'); {args.rounds} quiet rounds per phase, phases in turn; "
        f"the quiet tenant connects from {args.quiet_address}, `evil` from 127.0.0.1.\n\n"
        "| phase | quiet recall p50 ms (÷ alone) | quiet search_messages p50 | quiet append p50 "
        "| hostile calls done | peak RSS MiB (over the start) |\n|---|---:|---:|---:|---:|---:|\n"
        + "\n".join(r.rows)
        + f"\n\nRSS at the start of the phases {r.start_rss:.0f} MiB; "
        f"the process's high-water mark {r.hwm:.0f} MiB.\n\n"
        + verdicts(r)
        + "\nThe quiet tenant and `evil` connect from two addresses; on one address (`--quiet-address "
        "127.0.0.1`) the per-address head limit is theirs together (the script's docstring says what "
        "that did).\n"
    )
    print(body)
    if not args.no_write:
        write_section("hostile tenant (issue 36 item 4)", body)


if __name__ == "__main__":
    main()
