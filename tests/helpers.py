"""Test helpers shared across modules (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


@contextlib.contextmanager
def http_server(env: dict[str, str], *args: str) -> Iterator[str]:
    """`mongogate serve --http --insecure-no-auth` in its own process; yields the MCP URL."""
    port = free_port()
    proc = subprocess.Popen(
        [*EXE, "serve", "--http", "--insecure-no-auth", "--port", str(port), *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


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
