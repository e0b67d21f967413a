"""Scale-out on one engine: turns per second with 1, 2 and 4 stateless servers, and beside workers.

    .venv/bin/python benchmarks/scale_out.py [--clients 8] [--turns 25] [--record]

One shared embedded engine process (a temporary data directory); `serve --http --stateless`
processes on it; `--clients` concurrent clients, each running `--turns` whole turns
(`begin_turn` + `end_turn`, each call to the next server: no sticky routing). Every
configuration gets a fresh database, so each sees the same collection sizes. Then two servers
again with 1 and 2 `mongogate worker` processes running a fleet of 20 agents (one tick per
second each) on the same engine: turns/s of the servers and ticks/s of the workers.

The embedded engine executes one command at a time: more servers are not expected to be
faster here. The point is that they are correct (every acknowledged turn is stored once,
checked at the end of each configuration) and what a second process costs per call.
Ratios are against one server in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
from pymongo import AsyncMongoClient

from mongogate.engine import client as engine_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lib.results import write_section

ROOT = Path(__file__).resolve().parents[1]
EXE = [sys.executable, "-m", "mongogate.cli"]
HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2025-06-18",
}
FLEET = """
from mongogate.scheduler import AgentRegistry
agents = AgentRegistry()
for i in range(20):
    async def tick(ctx):
        await ctx.db['beats'].insert_one({'agent': ctx.agent_key, 'slot': ctx.scheduled_at})
    agents.agent(f'a{i}', every=1)(tick)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit("server did not start")


@contextlib.contextmanager
def processes(env: dict[str, str], servers: int, workers: int, fleet: Path) -> Iterator[list[str]]:
    procs: list[subprocess.Popen[bytes]] = []
    urls = []
    try:
        for _ in range(servers):
            port = free_port()
            p = subprocess.Popen(
                [*EXE, "serve", "--http", "--stateless", "--insecure-no-auth", "--port", str(port)],
                env=env,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            procs.append(p)
            wait_port(port, p)
            urls.append(f"http://127.0.0.1:{port}/mcp")
        for i in range(workers):
            cmd = [*EXE, "worker", "--agents", f"{fleet}:agents", "--no-entry-points", "--worker-id", f"w{i}"]
            procs.append(
                subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        yield urls
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class Caller:
    def __init__(self, hc: httpx2.AsyncClient, urls: list[str]) -> None:
        self.hc, self.urls, self.i = hc, urls, 0

    async def call(self, name: str, **arguments: Any) -> dict[str, Any]:
        self.i += 1
        body = {"jsonrpc": "2.0", "id": self.i, "method": "tools/call"}
        body["params"] = {"name": name, "arguments": arguments}
        r = await self.hc.post(self.urls[self.i % len(self.urls)], json=body, headers=HEADERS)
        r.raise_for_status()
        for line in r.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                msg = json.loads(line[5:])
                if "result" in msg:
                    assert not msg["result"].get("isError"), msg
                    out: dict[str, Any] = msg["result"]["structuredContent"]
                    return out
        raise AssertionError(r.text)


async def measure(urls: list[str], clients: int, turns: int, uri: str, db: str) -> tuple[float, int]:
    """Turns per second; checks that every acknowledged turn is stored exactly once."""
    acked = 0
    async with httpx2.AsyncClient(timeout=120) as hc:

        async def client(k: int) -> None:
            nonlocal acked
            c = Caller(hc, urls)
            c.i = k  # spread the first calls over the servers
            sid = (await c.call("create_session"))["session_id"]
            for t in range(turns):
                begun = await c.call("begin_turn", session_id=sid, turn_id=f"t{t}", text=f"q{k}.{t}")
                await c.call(
                    "end_turn", session_id=sid, turn_id=f"t{t}", lease_id=begun["lease_id"], reply="a"
                )
                acked += 1

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for k in range(clients):
                tg.start_soon(client, k)
        elapsed = time.perf_counter() - start
    async with AsyncMongoClient[dict[str, Any]](uri) as mc:
        stored = await mc[db]["messages"].count_documents({})
    assert stored == 2 * acked, f"{stored} messages stored for {acked} acknowledged turns"
    return acked / elapsed, acked


async def ticks_per_s(uri: str, db: str, seconds: float) -> float:
    async with AsyncMongoClient[dict[str, Any]](uri) as mc:
        return await mc[db]["beats"].count_documents({}) / seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--turns", type=int, default=25, help="turns per client per configuration")
    ap.add_argument("--record", action="store_true", help="write the section of benchmarks/RESULTS.md")
    args = ap.parse_args()
    began = time.time()
    rows: list[tuple[str, float, int, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        fleet = Path(tmp) / "fleet.py"
        fleet.write_text(FLEET)
        lease = engine_client.lease(data, 300)
        lease.release()
        try:
            base_env = {
                **os.environ,
                "MONGOGATE_SERVER__DATA_DIR": str(data),
                "MONGOGATE_AUTH__TENANT": "acme",
            }
            base_env.pop("MONGOGATE_DATABASE__URI", None)
            base_env["MONGOGATE_SCHEDULER__JITTER_MAX_S"] = "0"
            for servers, workers in ((1, 0), (2, 0), (4, 0), (2, 1), (2, 2)):
                db = f"scale_{servers}s{workers}w"
                env = base_env | {"MONGOGATE_DATABASE__NAME": db}
                with processes(env, servers, workers, fleet) as urls:
                    t0 = time.perf_counter()
                    rate, acked = anyio.run(measure, urls, args.clients, args.turns, lease.uri, db)
                    ticks = (
                        anyio.run(ticks_per_s, lease.uri, db, time.perf_counter() - t0) if workers else 0.0
                    )
                name = f"{servers} server{'s' if servers > 1 else ''}" + (
                    f" + {workers} worker(s)" if workers else ""
                )
                rows.append((name, rate, acked, f"{ticks:.1f}" if workers else "-"))
                print(f"{name:28} {rate:7.1f} turns/s  ({acked} turns, 0 lost, 0 duplicated)", flush=True)
        finally:
            engine_client.stop(data)
    base = rows[0][1]
    table = [
        "| configuration | turns/s | ÷ 1 server | turns | worker ticks/s |",
        "|---|---:|---:|---:|---:|",
        *(f"| {n} | {r:.1f} | {r / base:.2f}x | {a} | {t} |" for n, r, a, t in rows),
    ]
    print("\n".join(table))
    if args.record:
        flags = f"--clients {args.clients} --turns {args.turns} --record"
        cmd = f"`.venv/bin/python benchmarks/scale_out.py {flags}`"
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        body = "\n".join(
            [
                f"Command: {cmd}. Python {platform.python_version()} on {platform.system()} "
                f"{platform.machine()}, {os.cpu_count()} cores shared with other engineers' test runs "
                f"(heavily loaded: ratios matter, not absolutes); {when}"
                f"; whole run {time.time() - began:.0f} s.",
                "",
                f"One shared embedded engine process; stateless HTTP servers; {args.clients} concurrent "
                "clients, "
                "each call to the next server. A turn is `begin_turn` + `end_turn`; every configuration "
                "checks that the stored messages are exactly two per acknowledged turn "
                "(0 lost, 0 duplicated).",
                "",
                *table,
                "",
                "The embedded engine runs one command at a time on a SQLite file, so more server processes "
                "do not add throughput here: they add a process hop and compete for the same two cores. "
                "On a replica set the servers scale with the primary's write capacity instead (see "
                "docs/DEPLOYMENT.md for the arithmetic). Workers share the engine with the servers: their "
                "ticks (20 agents, one tick per second each) take turns from the servers.",
                "",
            ]
        )
        write_section("scale out", body)


if __name__ == "__main__":
    main()
