"""`mongogate serve` stopped with Ctrl-C (SIGINT), in a real process, over HTTP and over stdio:
the server shuts down (its lifespan flushes the audit log and closes the database) and says so in
one line, exit status 130 (128 + 2, what a shell reports for Ctrl-C). Old code: a 40-line
`KeyboardInterrupt` traceback on stderr after every Ctrl-C of `make run` (uvicorn, and the SDK's
stdio runner, raise it once they have shut down). And SIGTERM, what a client sends a stdio server
that has not left once its stdin closed: old code died at once (no shutdown: the lifespan's close
skipped, audit lines still queued lost); now it shuts down first, then ends by the signal, as
uvicorn does over HTTP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers import EXE, INITIALIZE, free_port, send, stdio_serve, wait_for_port

STOPPED = "mongogate: stopped (Ctrl-C)"
#: the lifespan's last line (INFO)
SHUT_DOWN = "shut down: the audit log flushed and the database closed"


@pytest.fixture
def env(engine_uri: str, db_name: str, tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    return e | {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_AUTH__TENANT": "acme",
        "MONGOGATE_SERVER__LOG_LEVEL": "INFO",
    }


def _stopped(proc: subprocess.Popen[str], sig: int = signal.SIGINT) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        proc.wait(timeout=120)  # stdin left open: a terminal's Ctrl-C closes no pipe
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:  # pragma: no cover
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    return proc.returncode, err


def test_ctrl_c_stops_an_http_server_in_one_line(env: dict[str, str]) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*EXE, "serve", "--http", "--insecure-no-auth", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_port(port, proc)
    status, err = _stopped(proc)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert status == 130, err
    lines = err.strip().splitlines()
    assert lines[-1] == STOPPED and lines[-2].endswith(SHUT_DOWN), err


def _stdio_serving(env: dict[str, str]) -> subprocess.Popen[str]:
    proc = stdio_serve(env)
    assert proc.stdout is not None
    send(proc, INITIALIZE[0])
    assert json.loads(proc.stdout.readline())["result"]["serverInfo"]["name"] == "mongogate"
    send(proc, INITIALIZE[1])
    # a call that needs the database: answered, so the database is open when Ctrl-C comes
    send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "list_memories"}})
    answer = json.loads(proc.stdout.readline())
    assert answer["id"] == 2 and not answer["result"].get("isError"), answer
    return proc


def test_ctrl_c_stops_a_stdio_server_in_one_line(env: dict[str, str]) -> None:
    status, err = _stopped(_stdio_serving(env))
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert status == 130, err
    lines = err.strip().splitlines()
    assert lines[-1] == STOPPED and lines[-2].endswith(SHUT_DOWN), err


def test_sigterm_shuts_a_stdio_server_down_before_it_ends(env: dict[str, str]) -> None:
    status, err = _stopped(_stdio_serving(env), signal.SIGTERM)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert status == -signal.SIGTERM, err  # ended by the signal, as a supervisor expects
    assert err.strip().splitlines()[-1].endswith(SHUT_DOWN), err
