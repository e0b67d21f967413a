"""How long `mongogate serve` takes to be usable, against a bare SDK server started the same way,
interleaved in the same run: over stdio to the `tools/list` answer, over HTTP (`serve --http`)
to the first `200` from `GET /readyz`; and where start-up goes.

Contenders, each spawned fresh per round, in a rotating order:

- ``floor``: benchmarks/lib/startup_floor.py, a bare ``MCPServer`` with one tool, on stdio
  (raw JSON-RPC lines over the pipes, so no client library time is counted);
- ``mongogate``: ``mongogate serve`` on a warm data directory (its engine already running)
  with one query tool, as an operator runs it;
- ``floor (HTTP)``: the same bare server on Streamable HTTP, with a ``/readyz`` route that
  answers at once;
- ``mongogate --http``: ``mongogate serve --http`` with the same query tool and JWT auth (an
  HS256 secret), whose ``/readyz`` answers once the database is open and the start-up checks
  passed (server/health.py).

The HTTP clock stops at the first ``200`` of ``GET /readyz`` polled every 5 ms (a refused
connection is retried; one accepted before the server serves waits for it). Times are from
spawn to the answer; "CPU to initialize" is the user + system CPU time a stdio server spent until
its initialize answer (it is killed right after), which moves far less with the machine's load
than wall time. The load average is printed before and after each round. The phase table
(``--phases``) times each step of start-up in one fresh interpreter: imports, configuration,
tool building, engine discovery (and a cold engine start), the lifespan's open and checks, and
the embedder's load (on the first `remember` or `recall`, not at start).

    python benchmarks/startup.py [--rounds 15] [--baseline-src DIR] [--no-write]

``--baseline-src DIR`` adds ``mongogate@base`` and ``mongogate@base --http``: the same commands
with ``PYTHONPATH=DIR`` (a ``src`` folder of another revision, e.g. from ``git archive``), in the
same rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
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
#: the HTTP contenders' auth: JWT with an HS256 secret (what `make run` serves), not --insecure-no-auth
JWT = '[auth]\nmode = "jwt"\njwt_secret = "startup-benchmark-secret-of-32-bytes-or-more"\n'
SECTION = "Start-up (stdio tools/list, HTTP /readyz)"


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


def _stop(proc: subprocess.Popen[bytes], *, http: bool = False) -> None:
    if proc.stdin is not None:
        proc.stdin.close()  # EOF: a stdio server shuts down by itself
    if http and proc.poll() is None:  # it serves until told
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()


def one_start(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """stdio: (spawn -> initialize answered, spawn -> tools/list answered), seconds."""
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
        _stop(proc)
    return t_init, t_list


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_start(cmd: list[str], port: int, env: dict[str, str]) -> float:
    """HTTP: spawn -> the first 200 of GET /readyz, seconds."""
    url = f"http://127.0.0.1:{port}/readyz"
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=None, stderr=subprocess.DEVNULL, env=env)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd} exited with {proc.returncode} before it was ready")
            try:
                with urllib.request.urlopen(url, timeout=120) as r:
                    if r.status == 200:
                        return time.perf_counter() - started
            except (urllib.error.URLError, ConnectionError):
                pass  # not listening yet, or 503: not ready
            time.sleep(0.005)
    finally:
        _stop(proc, http=True)


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
    mongogate.server.app.build_server(settings, registry, transport="http")
    t = mark("build the tools and the server (HTTP, JWT)", t)

    import anyio

    from mongogate.engine import client as engine_client

    lease = engine_client.lease(settings.server.data_dir, settings.database.engine_idle_stop_s)
    lease.release()
    t = mark("engine discovery (warm: engine.json, lock, credentials)", t)

    async def db_steps() -> None:
        from mongogate.assembly import no_caller, no_scope_check, open_services
        from mongogate.audit import audit_from_settings
        from mongogate.db import Database
        from mongogate.server.app import _log_sizes
        from mongogate.server.preflight import StartupChecks, check_connection, check_indexes

        t = time.perf_counter()
        db = Database(settings.database, settings.server.data_dir)
        await db.open()
        t = mark("lifespan: open the database (both connections)", t)
        checks = StartupChecks(hints="cli")
        await check_connection(db, settings, checks)
        t = mark("lifespan: start-up checks (ping, query user)", t)
        audit = audit_from_settings(settings, db.uri, "bench")
        state = await open_services(
            settings,
            db,
            audit=audit,
            principal=no_caller,
            require_scopes=no_scope_check,
            run_tools=True,
        )
        t = mark("lifespan: services and their indexes (already there)", t)
        await check_indexes(db, registry.query_specs, checks)
        t = mark("lifespan: declared query-tool indexes", t)
        await _log_sizes(db, settings.database.engine_size_warning)
        t = mark("collection sizes (after ready, beside the first calls)", t)
        await state.recall.embedder.embed(["warm"])
        mark("embedder: import and load wordllama (first remember / recall)", t)
        audit.close()
        await db.close()

    anyio.run(db_steps)
    engine_client.stop(settings.server.data_dir)
    t = time.perf_counter()
    lease = engine_client.lease(settings.server.data_dir, settings.database.engine_idle_stop_s)
    lease.release()
    mark("cold engine start (not on the warm path)", t)
    print(json.dumps(out))


def _compile_bytecode(baseline_src: Path | None) -> None:
    """Every contender starts from compiled bytecode, as an installed package does (pip compiles
    it at install). The MCP SDK in site-packages has it; a checkout's mongogate (and a
    ``--baseline-src`` from `git archive`) has it only for the modules some run wrote, and never
    where ``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it): each start then compiled the
    changed modules again, 50 of them here, and the ratio counted that against mongogate."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("mongogate")
    assert spec is not None and spec.origin is not None
    trees = [Path(spec.origin).parent]
    if baseline_src is not None:
        trees.append(baseline_src / "mongogate")
    for tree in trees:
        compileall.compile_dir(str(tree), quiet=1)


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


def _load() -> tuple[float, float, float]:
    return os.getloadavg()


def render(
    times: dict[str, list[tuple[float, float]]],
    cpu: dict[str, list[float]],
    http: dict[str, list[float]],
    loads: list[tuple[float, float, float]],
    steps: dict[str, float],
    command: str,
    elapsed: float,
) -> str:
    floor, floor_http = times["floor"], http["floor (HTTP)"]
    first, last = (", ".join(f"{x:.1f}" for x in load) for load in (loads[0], loads[-1]))
    rounds = ", ".join(f"{load[0]:.1f}" for load in loads[1:])
    lines = [
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f"{os.cpu_count()} cores shared with other engineers' work; every contender from compiled bytecode; "
        f"mcp {version('mcp')}, pymongo {version('pymongo')}, mongoeco {version('mongoeco')}; "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; whole run {elapsed:.0f} s; load average (1, 5, 15 min) "
        f"at the start {first}, at the end {last}; 1-minute load after each round: {rounds} (absolute "
        "times move with the load; the ratios, each against the floor of the same round, much less).",
        "",
        f"`{command}`",
        "",
        f"Spawn to answer, {len(floor)} rounds per contender, interleaved (order rotating each round); "
        "ratio: median over rounds of (contender / floor of that round).",
        "",
        "| stdio server | initialize p50 | ratio | tools/list p50 | ratio | CPU to initialize p50 | ratio |",
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
    lines += ["", "| HTTP server | /readyz 200 p50 | p90 | ratio |", "|---|---|---|---|"]
    for name, ys in http.items():
        p90 = statistics.quantiles(ys, n=10)[-1] if len(ys) > 1 else ys[0]
        ratio = _median([a / b for a, b in zip(ys, floor_http, strict=True)])
        lines.append(f"| {name} | {_median(ys) * 1000:.0f} ms | {p90 * 1000:.0f} ms | {ratio:.2f}x |")
    lines += ["", "Where start-up goes (one fresh interpreter, each step once, in order):", ""]
    lines += ["| step | ms |", "|---|---|"]
    lines += [f"| {k} | {v * 1000:.0f} |" for k, v in steps.items()]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--baseline-src", type=Path, help="src/ of another revision, run as mongogate@base")
    ap.add_argument("--phases-child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.phases_child:
        _phases_child(a.phases_child)
        return
    started = time.perf_counter()
    loads: list[tuple[float, float, float]] = [_load()]
    with tempfile.TemporaryDirectory(prefix="mongogate-startup-") as tmp:
        data = Path(tmp) / "data"
        with_tool, with_jwt = Path(tmp) / "tool.toml", Path(tmp) / "jwt.toml"
        common = f'[server]\ndata_dir = "{data}"\n'
        from query_overhead import CONFIG  # the same find_orders spec, plus its index

        with_tool.write_text(common + '[auth]\ntenant = "bench"\n' + CONFIG + INDEX)
        with_jwt.write_text(common + JWT + CONFIG + INDEX)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
        _compile_bytecode(a.baseline_src)
        mg = [sys.executable, "-m", "mongogate.cli"]
        floor = [sys.executable, str(HERE / "lib" / "startup_floor.py")]
        stdio_cmd = [*mg, "serve", "--config", str(with_tool)]
        contenders = {"floor": floor, "mongogate": stdio_cmd}
        http_contenders: dict[str, Callable[[int], list[str]]] = {
            "floor (HTTP)": lambda port: [*floor, "--http", str(port)],
            "mongogate --http": lambda port: [
                *mg,
                "serve",
                "--http",
                "--port",
                str(port),
                "--config",
                str(with_jwt),
            ],
        }
        envs = {name: env for name in [*contenders, *http_contenders]}
        if a.baseline_src is not None:
            base_env = env | {"PYTHONPATH": str(a.baseline_src.resolve())}
            contenders["mongogate@base"] = stdio_cmd
            http_contenders["mongogate@base --http"] = http_contenders["mongogate --http"]
            envs |= {"mongogate@base": base_env, "mongogate@base --http": base_env}
        # warm the data directory: the engine is started once, and the declared index created
        quiet = subprocess.DEVNULL
        subprocess.run(
            [*mg, "engine", "start", "--config", str(with_tool)], check=True, env=env, stdout=quiet
        )
        from pymongo import MongoClient

        uri = subprocess.run(
            [*mg, "engine", "status", "--uri", "--config", str(with_tool)],
            check=True,
            env=env,
            capture_output=True,
            text=True,
        ).stdout.strip()
        client: MongoClient[dict[str, Any]]
        with MongoClient(uri) as client:
            client["mongogate"]["orders"].create_index([("userId", 1), ("createdAt", -1)])
        try:

            def warm_up() -> None:  # one start each, not counted (file caches)
                for name, cmd in contenders.items():
                    one_start(cmd, envs[name])
                for name, make in http_contenders.items():
                    port = free_port()
                    http_start(make(port), port, envs[name])

            warm_up()  # the data directory's indexes and one-time steps done, as on a restart
            steps = phases(with_jwt, env)  # it ends with a cold start of the engine
            warm_up()
            times: dict[str, list[tuple[float, float]]] = {n: [] for n in contenders}
            cpu: dict[str, list[float]] = {n: [] for n in contenders}
            http: dict[str, list[float]] = {n: [] for n in http_contenders}
            names = [*contenders, *http_contenders]
            for r in range(a.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    if name in contenders:
                        times[name].append(one_start(contenders[name], envs[name]))
                        cpu[name].append(cpu_to_initialize(contenders[name], envs[name]))
                    else:
                        port = free_port()
                        http[name].append(http_start(http_contenders[name](port), port, envs[name]))
                loads.append(_load())
        finally:
            subprocess.run([*mg, "engine", "stop", "--config", str(with_tool)], env=env, stdout=quiet)
    command = "python benchmarks/startup.py " + shlex.join(sys.argv[1:])
    body = render(times, cpu, http, loads, steps, command.strip(), time.perf_counter() - started)
    print(body)
    if not a.no_write:
        write_section(SECTION, body, RESULTS)
        print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
