"""`mongogate serve` stopped with Ctrl-C (SIGINT), in a real process, over HTTP and over stdio:
the server shuts down (its lifespan flushes the audit log and closes the database) and says so in
one line, exit status 130 (128 + 2, what a shell reports for Ctrl-C). Old code: a 40-line
`KeyboardInterrupt` traceback on stderr after every Ctrl-C of `make run` (uvicorn, and the SDK's
stdio runner, raise it once they have shut down). And SIGTERM, what a client sends a stdio server
that has not left once its stdin closed: old code died at once (no shutdown: the lifespan's close
skipped, audit lines still queued lost); now it shuts down first, then ends by the signal, as
uvicorn does over HTTP."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from tests.helpers import (
    INITIALIZE,
    ROOT,
    free_port,
    http_serve,
    send,
    served_env,
    stdio_serve,
    wait_for_port,
)

STOPPED = "mongogate: stopped (Ctrl-C)"
#: the lifespan's last line (INFO)
SHUT_DOWN = "shut down: the audit log flushed and the database closed"


@pytest.fixture
def env(engine_uri: str, db_name: str, tmp_path: Path) -> dict[str, str]:
    return served_env(tmp_path / "data", engine_uri, db_name, server__log_level="INFO")


def _stopped(proc: subprocess.Popen[str], sig: int = signal.SIGINT) -> tuple[int, str]:
    proc.send_signal(sig)
    return _ended(proc)


def _ended(proc: subprocess.Popen[str]) -> tuple[int, str]:
    """The exit status and the rest of stderr, once the process has ended."""
    try:
        proc.wait(timeout=120)  # stdin left open: a terminal's Ctrl-C closes no pipe
        assert proc.stderr is not None
        err = proc.stderr.read()
    finally:
        _gone(proc)
    return proc.returncode, err


def _gone(proc: subprocess.Popen[str]) -> None:
    """Killed if it is still there, its pipes closed."""
    if proc.poll() is None:  # pragma: no cover
        proc.kill()
        proc.wait()
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def test_ctrl_c_stops_an_http_server_in_one_line(env: dict[str, str]) -> None:
    port = free_port()
    proc = http_serve(env, port)
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


class _HeldDatabase:
    """A TCP port in front of the test database: connections are accepted at once and forwarded
    only once `released`, so a server's open of the database is held in flight (a barrier)."""

    def __init__(self, engine_uri: str) -> None:
        where = unquote(engine_uri.split("//", 1)[1].split("/?", 1)[0].split("@")[-1])
        host, _, port = where.rpartition(":")
        self._target: Any = where if where.endswith(".sock") else (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.uri = f"mongodb://127.0.0.1:{self._listener.getsockname()[1]}/?serverSelectionTimeoutMS=20000"
        self.connected, self.released = threading.Event(), threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self._listener.accept()
                self.connected.set()
                self._threads.append(threading.Thread(target=self._forward, args=(conn,), daemon=True))
                self._threads[-1].start()

    def _forward(self, conn: socket.socket) -> None:
        with conn:
            self.released.wait()
            family = socket.AF_UNIX if isinstance(self._target, str) else socket.AF_INET
            with socket.socket(family) as db:
                db.connect(self._target)
                back = threading.Thread(target=_pipe, args=(db, conn), daemon=True)
                back.start()
                _pipe(conn, db)
                back.join()

    def close(self) -> None:
        """Once the server has ended: every connection is gone, its sockets closed."""
        self.released.set()
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for t in self._threads:
            t.join(timeout=30)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    for s in (src, dst):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


def _line(proc: subprocess.Popen[str], ending: str, seen: list[str]) -> None:
    """Read stderr up to a line ending with `ending` (a barrier: the server has got there)."""
    assert proc.stderr is not None
    while line := proc.stderr.readline():
        seen.append(line)
        if line.rstrip().endswith(ending):
            return
    raise AssertionError(f"stderr ended before {ending!r}: {''.join(seen)}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_once_stdin_closed_lets_the_shutdown_finish(
    env: dict[str, str], engine_uri: str, sig: signal.Signals
) -> None:
    """What an MCP client does to stop a stdio server: close its stdin, then SIGTERM it when it
    has not left in time. Old code: the signal cancelled the shutdown already under way (here
    waiting for the database's open, held): the open cut off, the database never closed, the
    audit log not flushed; the process ended at once. Now the signal is noted and the shutdown
    runs to its end, then the process ends by it."""
    held = _HeldDatabase(engine_uri)
    seen: list[str] = []
    proc = stdio_serve(env | {"MONGOGATE_DATABASE__URI": held.uri})
    try:
        assert proc.stdout is not None and proc.stdin is not None
        send(proc, INITIALIZE[0])
        assert json.loads(proc.stdout.readline())["result"]["serverInfo"]["name"] == "mongogate"
        send(proc, INITIALIZE[1])
        assert held.connected.wait(60)  # the open has begun, and is held
        proc.stdin.close()  # the client leaves: the shutdown waits for the open
        _line(proc, "shutting down: waiting for the database to finish opening", seen)
        proc.send_signal(sig)
        _line(proc, "stopping once shut down (a second signal: at once)", seen)
        held.released.set()
        status, err = _ended(proc)
    finally:
        held.close()
        _gone(proc)
    err = "".join(seen) + err
    assert "Traceback" not in err, err
    assert status == (130 if sig == signal.SIGINT else -signal.SIGTERM), err
    lines = err.strip().splitlines()
    if sig == signal.SIGINT:
        assert lines[-1] == STOPPED, err
        lines.pop()
    assert lines[-1].endswith(SHUT_DOWN), err  # the open finished, then the whole shutdown ran


#: `mongogate serve` held while it loads its commands (an import hook reading stdin): a barrier
#: for a Ctrl-C during start-up, before `serve` itself runs
LOADING = textwrap.dedent(
    """
    import importlib.abc, sys
    from mongogate.cli import main

    class Hold(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name == "mongogate.cli.serve":
                sys.meta_path.remove(self)
                print("loading", flush=True)
                sys.stdin.readline()  # Ctrl-C comes here
            return None

    sys.meta_path.insert(0, Hold())
    sys.exit(main(["serve"]))
    """
)


def test_ctrl_c_while_serve_loads_is_one_line_too(env: dict[str, str]) -> None:
    """Old code: Ctrl-C in `make run`'s first half second (the commands still loading, before
    `serve` runs) printed the KeyboardInterrupt traceback the one line was meant to replace."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LOADING],
        env=env,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "loading\n"
    status, err = _stopped(proc)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert status == 130 and err.strip().splitlines() == [STOPPED], err
