"""How long a stdio `mongogate serve` takes to answer `initialize` (and `tools/list`), against a
bare SDK server started the same way, interleaved in the same run; and where start-up goes.

Contenders, each spawned fresh per round on the SDK's stdio transport (raw JSON-RPC lines over
the pipes, so no client library time is counted), in a rotating order:

- ``floor``: benchmarks/lib/startup_floor.py, a bare ``MCPServer`` with one tool;
- ``mongogate``: ``mongogate serve`` on a warm data directory (its engine already running)
  with one query tool, as an operator runs it;
- ``mongogate (no query tools)``: the same without ``[[query_tools]]``.

Times are from spawn to the response line; "CPU to initialize" is the user + system CPU time
the server spent until its initialize answer (it is killed right after), which moves far less
with the machine's load than wall time. The phase table (``--phases``) times each step of
start-up in one fresh interpreter: imports, configuration, tool building, engine discovery
(and a cold engine start), connecting, index creation, the privilege check.

    python benchmarks/startup.py [--rounds 15] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from lib.mcp_messages import INITIALIZE, INITIALIZED  # benchmarks/lib/mcp_messages.py, beside this script
from lib.results import RESULTS, write_section  # benchmarks/lib/results.py, beside this script

HERE = Path(__file__).resolve().parent
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
#: added to query_overhead's find_orders spec (imported in main(): the phase child must import nothing)
INDEX = 'index = [["userId", 1], ["createdAt", -1]]\n'


def _line(proc: subprocess.Popen[bytes], msg: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()


def _answer(proc: subprocess.Popen[bytes], want_id: int) -> dict[str, Any]:
    assert proc.stdout is not None
    while True:
        raw = proc.stdout.readline()
        if not raw:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"server exited before answering: {err[-2000:]}")
        msg = json.loads(raw)
        if msg.get("id") == want_id:
            if "error" in msg:
                raise RuntimeError(f"error answer: {msg}")
            return dict(msg)


def one_start(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(spawn -> initialize answered, spawn -> tools/list answered), seconds."""
    started = time.perf_counter()
    pipe = subprocess.PIPE
    proc = subprocess.Popen(cmd, stdin=pipe, stdout=pipe, stderr=pipe, env=env)
    try:
        _line(proc, INITIALIZE)
        _answer(proc, 1)
        t_init = time.perf_counter() - started
        _line(proc, INITIALIZED)
        _line(proc, LIST)
        tools = _answer(proc, 2)["result"]["tools"]
        t_list = time.perf_counter() - started
        assert tools, "no tools listed"
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # EOF: the server shuts down by itself
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
    return t_init, t_list


def cpu_to_initialize(cmd: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) the server spent from spawn to its initialize answer: it is
    killed at once after, so nothing it does later counts. Far less noisy than wall time."""
    pipe = subprocess.PIPE
    proc = subprocess.Popen(cmd, stdin=pipe, stdout=pipe, stderr=subprocess.DEVNULL, env=env)
    try:
        _line(proc, INITIALIZE)
        _answer(proc, 1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = status
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                f.close()
    return usage.ru_utime + usage.ru_stime


def _phases_child(config: str) -> None:
    """In a fresh interpreter: time each start-up step once, print one JSON object."""
    t0 = time.perf_counter()
    out: dict[str, float] = {}

    def mark(name: str, since: float) -> float:
        now = time.perf_counter()
        out[name] = now - since
        return now

    import mcp.server.mcpserver  # noqa: F401  # what the floor imports too

    t = mark("import the MCP SDK", t0)
    import mongogate.cli.serve
    import mongogate.server.app
    import mongogate.tools.query_tools

    t = mark("import mongogate (cli, server, tools, pymongo)", t)
    from mongogate.config import load_settings

    settings = load_settings(config)
    t = mark("configuration", t)
    from mongogate.cli.common import registry_for

    registry = registry_for(settings, False)
    mongogate.server.app.build_server(settings, registry)
    t = mark("build the tools and the server", t)

    import anyio

    from mongogate.engine import client as engine_client

    lease = engine_client.lease(settings.server.data_dir, settings.database.engine_idle_stop_s)
    lease.release()
    t = mark("engine discovery (warm: engine.json, lock, credentials)", t)

    async def db_steps() -> None:
        from mongogate.db import Database
        from mongogate.memory.store import MemoryStore
        from mongogate.policy.query_indexes import index_status
        from mongogate.runs import Runs

        db = Database(settings.database, settings.server.data_dir)
        t = time.perf_counter()
        await db.open()
        await db.ping()
        t = mark("open and ping both connections", t)
        await MemoryStore(db.memory, settings.memory).ensure_indexes()
        await Runs(db.memory, settings.memory).ensure_indexes()
        t = mark("create memory and run indexes (already there)", t)
        await index_status(db.query, registry.query_specs)
        t = mark("check declared query-tool indexes", t)
        if settings.database.uri is not None:
            from mongogate.privileges import check_query_user

            await check_query_user(db.query_client)
        mark("privilege check (not run on the embedded engine)", t)
        await db.close()

    anyio.run(db_steps)
    engine_client.stop(settings.server.data_dir)
    t = time.perf_counter()
    lease = engine_client.lease(settings.server.data_dir, settings.database.engine_idle_stop_s)
    lease.release()
    mark("cold engine start (not on the warm path)", t)
    print(json.dumps(out))


def phases(config: Path, env: dict[str, str]) -> dict[str, float]:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
    bare = time.perf_counter() - t
    run = subprocess.run(
        [sys.executable, __file__, "--phases-child", str(config)],
        check=True,
        env=env,
        capture_output=True,
        text=True,
    )
    return {"interpreter start (python -c pass)": bare, **json.loads(run.stdout.strip().splitlines()[-1])}


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def render(
    times: dict[str, list[tuple[float, float]]],
    cpu: dict[str, list[float]],
    steps: dict[str, float],
    command: str,
    elapsed: float,
) -> str:
    floor = times["floor"]
    load = os.getloadavg()
    lines = [
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores; "
        f"mcp {version('mcp')}, pymongo {version('pymongo')}, mongoeco {version('mongoeco')}; "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; whole run {elapsed:.0f} s; load average at the end "
        f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f} (a shared machine: absolute times move with the load; "
        "the ratios, each against the floor of the same round, much less).",
        "",
        f"`{command}`",
        "",
        f"Spawn to answer, {len(floor)} rounds per contender, interleaved (order rotating each round); "
        "ratio: median over rounds of (contender / floor of that round).",
        "",
        "| server | initialize p50 | ratio | tools/list p50 | ratio | CPU to initialize p50 | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, xs in times.items():
        r_init = _median([a[0] / b[0] for a, b in zip(xs, floor, strict=True)])
        r_list = _median([a[1] / b[1] for a, b in zip(xs, floor, strict=True)])
        r_cpu = _median([a / b for a, b in zip(cpu[name], cpu["floor"], strict=True)])
        lines.append(
            f"| {name} | {_median([x[0] for x in xs]) * 1000:.0f} ms | {r_init:.2f}x | "
            f"{_median([x[1] for x in xs]) * 1000:.0f} ms | {r_list:.2f}x | "
            f"{_median(cpu[name]) * 1000:.0f} ms | {r_cpu:.2f}x |"
        )
    lines += ["", "Where start-up goes (one fresh interpreter, each step once, in order):", ""]
    lines += ["| step | ms |", "|---|---|"]
    lines += [f"| {k} | {v * 1000:.0f} |" for k, v in steps.items()]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--phases-child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.phases_child:
        _phases_child(a.phases_child)
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mongogate-startup-") as tmp:
        data = Path(tmp) / "data"
        with_tool, bare_cfg = Path(tmp) / "tool.toml", Path(tmp) / "bare.toml"
        common = f'[server]\ndata_dir = "{data}"\n[auth]\ntenant = "bench"\n'
        from query_overhead import CONFIG  # the same find_orders spec, plus its index

        with_tool.write_text(common + CONFIG + INDEX)
        bare_cfg.write_text(common)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
        mg = [sys.executable, "-m", "mongogate.cli"]
        contenders = {
            "floor": [sys.executable, str(HERE / "lib" / "startup_floor.py")],
            "mongogate": [*mg, "serve", "--config", str(with_tool)],
            "mongogate (no query tools)": [*mg, "serve", "--config", str(bare_cfg)],
        }
        # warm the data directory: the engine is started once, and the declared index created
        quiet = subprocess.DEVNULL
        subprocess.run([*mg, "engine", "start", "--config", str(bare_cfg)], check=True, env=env, stdout=quiet)
        from pymongo import MongoClient

        uri = subprocess.run(
            [*mg, "engine", "status", "--uri", "--config", str(bare_cfg)],
            check=True,
            env=env,
            capture_output=True,
            text=True,
        ).stdout.strip()
        client: MongoClient[dict[str, Any]]
        with MongoClient(uri) as client:
            client["mongogate"]["orders"].create_index([("userId", 1), ("createdAt", -1)])
        try:
            for cmd in contenders.values():  # one start each, not counted (file caches)
                one_start(cmd, env)
            times: dict[str, list[tuple[float, float]]] = {n: [] for n in contenders}
            cpu: dict[str, list[float]] = {n: [] for n in contenders}
            names = list(contenders)
            for r in range(a.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    times[name].append(one_start(contenders[name], env))
                    cpu[name].append(cpu_to_initialize(contenders[name], env))
            steps = phases(with_tool, env)
        finally:
            subprocess.run([*mg, "engine", "stop", "--config", str(bare_cfg)], env=env, stdout=quiet)
    command = "python benchmarks/startup.py " + shlex.join(sys.argv[1:])
    body = render(times, cpu, steps, command.strip(), time.perf_counter() - started)
    print(body)
    if not a.no_write:
        write_section("Start-up (stdio initialize)", body, RESULTS)
        print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
