"""Test helpers shared across modules (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

ROOT = Path(__file__).resolve().parents[1]

#: the JSON-RPC opening of a protocol 2025-06-18 client (raw stdio or HTTP tests)
INITIALIZE: list[dict[str, Any]] = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
]
EXE = [sys.executable, "-m", "mongogate.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[str], timeout_s: float = 120) -> None:
    """Readiness, not a margin: poll until the server answers `/healthz`, fail if it exits first.

    `serve --http` binds its port before it opens the database (a taken port fails first), so
    an accepted connection is not yet a server: `/healthz` is answered only once it serves.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"server exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
            )
        try:
            left = max(0.1, deadline - time.monotonic())
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=left) as r:
                if r.status == 200:
                    return
        except (OSError, urllib.error.URLError):
            time.sleep(0.05)
    raise AssertionError(f"server on port {port} did not start within {timeout_s} s")


def served_env(data_dir: Path, engine_uri: str, db_name: str, **settings: str) -> dict[str, str]:
    """The environment of a `mongogate` process on the session's engine, tenant `acme` (no
    `MONGOGATE_*` of the caller's), plus ``settings`` (`MONGOGATE_<KEY>` each)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    return e | {
        "MONGOGATE_SERVER__DATA_DIR": str(data_dir),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_AUTH__TENANT": "acme",
        **{f"MONGOGATE_{k.upper()}": v for k, v in settings.items()},
    }


def http_serve(env: dict[str, str], port: int) -> subprocess.Popen[str]:
    """`mongogate serve --http --insecure-no-auth --port <port>` in its own process, stderr piped."""
    return subprocess.Popen(
        [*EXE, "serve", "--http", "--insecure-no-auth", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def stdio_serve(env: dict[str, str], *args: str, stderr: int = subprocess.PIPE) -> subprocess.Popen[str]:
    """`mongogate serve <args>` in its own process, spoken to in raw JSON-RPC lines on its pipes
    (see `send`); the caller closes its stdin to make it exit, then waits."""
    return subprocess.Popen(
        [*EXE, "serve", *args],
        env=env,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def send(proc: subprocess.Popen[str], msg: dict[str, Any]) -> None:
    """One JSON-RPC message, one line, on the process's stdin."""
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(msg) + "\n")
    proc.stdin.flush()


@contextlib.contextmanager
def http_servers(
    *servers: tuple[dict[str, str], list[str]] | tuple[dict[str, str], list[str], list[str]],
) -> Iterator[list[str]]:
    """Several `mongogate serve --http --insecure-no-auth` processes, each (env, extra args) or
    (env, extra args, command: `fault_harness.command(...)` for test hooks), started together and
    then waited for (a start-up is mostly a fresh interpreter's imports, which overlap); yields
    their MCP URLs in order, and stops them all."""
    procs: list[subprocess.Popen[str]] = []
    ports: list[int] = []
    try:
        for env, args, *command in servers:
            ports.append(free_port())
            procs.append(
                subprocess.Popen(
                    [
                        *(command[0] if command else EXE),
                        "serve",
                        "--http",
                        "--insecure-no-auth",
                        "--port",
                        str(ports[-1]),
                        *args,
                    ],
                    env=env,
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        for port, proc in zip(ports, procs, strict=True):
            wait_for_port(port, proc)
        yield [f"http://127.0.0.1:{port}/mcp" for port in ports]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()


@contextlib.contextmanager
def http_server(env: dict[str, str], *args: str) -> Iterator[str]:
    """`mongogate serve --http --insecure-no-auth` in its own process; yields the MCP URL."""
    with http_servers((env, list(args))) as [url]:
        yield url


async def ok(c: Client, tool: str, **args: Any) -> dict[str, Any]:
    r = await c.call_tool(tool, args)
    assert not r.is_error, r.content
    assert isinstance(r.structured_content, dict)
    return dict(r.structured_content)


async def failure(c: Client, tool: str, **args: Any) -> str:
    r = await c.call_tool(tool, args)
    assert r.is_error, r.structured_content
    text = r.content[0].text  # type: ignore[union-attr]
    assert isinstance(text, str)
    return text


def stress(small: Any, soak: Any, names: str = "trials") -> pytest.MarkDecorator:
    """One stress test, two sizes: `small` in `make test`, `soak` (marked `soak`) in `make soak`.

    The same test body runs both, so the quick run exercises exactly the code paths of the long
    one. Several names (`"threads,keys"`) take tuples, shown as `4x10` in the test id.
    """

    def param(v: Any, *marks: pytest.MarkDecorator) -> Any:
        return (
            pytest.param(*v, id="x".join(map(str, v)), marks=marks)
            if isinstance(v, tuple)
            else (pytest.param(v, id=str(v), marks=marks))
        )

    return pytest.mark.parametrize(names, [param(small), param(soak, pytest.mark.soak)])


def cpu_s(*threads: threading.Thread) -> float:
    """CPU seconds of the calling thread and of `threads`: a cost measured where the work runs.

    Never `time.process_time()` in a process that also runs the embedded engine: the engine's
    thread (and whatever it is still finishing for earlier tests) would be counted too."""
    total = time.thread_time()
    for t in threads:
        assert t.ident is not None, f"thread {t.name} has not started"
        total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
    return total
