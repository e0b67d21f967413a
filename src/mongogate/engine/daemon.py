"""The engine process: one per data directory, private, stopped on SIGTERM or when idle.

It holds `engine.lock` for its whole life (the kernel frees it if the process dies, which is
how others tell a crashed engine from a running one), publishes `engine.json`, and stops
after `idle_stop_s` with no client connection. It stops only while holding the start lock,
so a process that has just found it (and connects under that lock) is never left with a
vanished engine.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import IO

from mongogate.engine.embedded import EmbeddedEngine
from mongogate.engine.failure import word_of
from mongogate.engine.files import (
    ENGINE_LOCK,
    MECHANISM,
    START_LOCK,
    STATE_FILE,
    EngineState,
    credentials,
    lock_within,
    open_lock,
    private_file,
    read_state,
    secure_dir,
    socket_path,
    tighten_all,
    try_lock,
    write_private,
)
from mongogate.errors import ConfigError

log = logging.getLogger(__name__)

#: exit status when another engine already serves the directory (not an error for a starter)
ALREADY_RUNNING = 3
#: default idle period before an engine with no client stops itself
DEFAULT_IDLE_STOP_S = 300.0
#: how often the engine looks at its connection count
POLL_S = 0.5


def run(data_dir: Path, idle_stop_s: float, ready: int | None = None) -> int:
    """Serve until SIGTERM/SIGINT or idle; `ready` is a pipe fd told "ok" once serving, or the
    failure as a value (`failure.word_of`: its kind and message)."""
    os.umask(0o077)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def tell(message: str) -> None:
        nonlocal ready
        if ready is not None:
            with contextlib.suppress(OSError):
                os.write(ready, message.encode())
                os.close(ready)
            ready = None

    secure_dir(data_dir)
    lock = open_lock(data_dir / ENGINE_LOCK)
    if not try_lock(lock):
        tell("already running")
        return ALREADY_RUNNING
    engine: EmbeddedEngine | None = None
    held: IO[str] | None = None
    try:
        lock.seek(0)
        lock.truncate()
        lock.write(f"mongogate engine pid {os.getpid()}\n")
        lock.flush()
        tighten_all(data_dir)
        password = credentials(data_dir)
        # A Unix socket in the 0700 directory (never a TCP port: any local user could reach that),
        # at the same path every time, so clients of a stopped or crashed engine reconnect by
        # themselves once any process has started it again (engine.lock is held: a socket file
        # left there by a dead engine is ours to replace).
        engine = EmbeddedEngine(data_dir, password=password, socket_path=socket_path(data_dir))
        private_file(engine.data_file)
        engine.start()
        state = EngineState(
            pid=os.getpid(),
            host="",
            port=0,
            data_file=str(engine.data_file.resolve()),
            auth=MECHANISM,
            idle_stop_s=idle_stop_s,
            started_at=time.time(),
            socket=engine.address,
        )
        write_private(data_dir / STATE_FILE, state.as_dict())
        log.warning("engine pid %d on %s for %s", state.pid, state.address, data_dir)
        tell("ok")
        held = _serve(data_dir, engine, idle_stop_s, stop)
        return 0
    except BaseException as e:
        tell(word_of(e))
        raise
    finally:
        # Under the start lock: nobody may find engine.lock held while engine.json is gone.
        with held or open_lock(data_dir / START_LOCK) as start:
            if held is None:
                with contextlib.suppress(ConfigError):
                    lock_within(start, 30, "the start lock")
            if engine is not None:
                engine.stop()
            published = read_state(data_dir)
            if published is not None and published.pid == os.getpid():
                with contextlib.suppress(OSError):
                    (data_dir / STATE_FILE).unlink()
            with contextlib.suppress(OSError):
                lock.seek(0)
                lock.truncate()  # no dead pid left behind in engine.lock
            lock.close()  # releases engine.lock, then the start lock


def _serve(
    data_dir: Path, engine: EmbeddedEngine, idle_stop_s: float, stop: threading.Event
) -> IO[str] | None:
    """Serve until `stop` (None) or idle (the start lock, held)."""
    idle_since: float | None = None
    while not stop.wait(POLL_S):
        if engine.connections():
            idle_since = None
            continue
        now = time.monotonic()
        idle_since = idle_since if idle_since is not None else now
        if now - idle_since < idle_stop_s:
            continue
        # Idle long enough: stop only under the start lock, after a last look at the connections.
        start = open_lock(data_dir / START_LOCK)
        if not try_lock(start):
            start.close()  # someone is connecting right now
            continue
        if engine.connections():
            start.close()
            idle_since = None
            continue
        log.warning("engine idle for %.0f s with no client: stopping", idle_stop_s)
        return start  # still held: `run` stops the engine before anyone can find it
    return None
