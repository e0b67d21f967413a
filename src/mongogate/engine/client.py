"""Finding the engine of a data directory, starting it when none runs, stopping it.

`lease()` takes the start lock, starts the engine if no process holds `engine.lock`, and
returns its URI with the lock still held: the caller connects, then releases it. The engine
only stops for idleness under the same lock, so a found engine cannot vanish in between, and
two processes racing to start it are serialized: the second finds the first's engine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from mongogate.engine import failure
from mongogate.engine.daemon import ALREADY_RUNNING
from mongogate.engine.files import (
    ENGINE_LOCK,
    LOG_FILE,
    START_LOCK,
    STATE_FILE,
    EngineState,
    credentials,
    engine_running,
    lock_pid,
    lock_within,
    open_lock,
    read_state,
    secure_dir,
)
from mongogate.errors import ConfigError, InUse, MongogateError, StorageError

#: a cap on waiting for the start lock or a starting engine (a loaded machine, not a margin)
START_TIMEOUT_S = 120.0


@dataclass
class EngineLease:
    state: EngineState
    uri: str
    started: bool
    _lock: IO[str] | None

    def release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None


def spawn(
    data_dir: Path, idle_stop_s: float, *, command: list[str] | None = None, timeout_s: float | None = None
) -> bool:
    """Start a detached engine process; False when another one won the race (it is running).
    ``command`` and ``timeout_s``: the start's command and bound (the engine's own and
    START_TIMEOUT_S; a test passes a process that never answers)."""
    if command is None:
        command = [sys.executable, "-m", "mongogate.engine", "run", "--detach", "--data-dir", str(data_dir)]
        command += ["--idle-stop-s", repr(idle_stop_s)]
    bound = START_TIMEOUT_S if timeout_s is None else timeout_s
    try:
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=bound, check=False
        )
    except subprocess.TimeoutExpired as e:  # the starter is killed; an engine it forked goes on starting
        raise StorageError(
            f"could not start the embedded engine for {data_dir}: it did not say it was serving within "
            f"{bound:g} s (log: {data_dir / LOG_FILE})",
            advice="see its log; `mongogate engine status` tells whether it came up later",
        ) from e
    if done.returncode == ALREADY_RUNNING:
        return False
    if done.returncode != 0:
        raise _failed(data_dir, (done.stderr or "").strip().splitlines()[-1:], done.returncode)
    return True


def _failed(data_dir: Path, last: list[str], returncode: int) -> MongogateError:
    """The error of a start that failed, by the kind the engine process told (engine/failure.py)."""
    if last:
        kind, message = failure.read(last[0])
    else:  # no word at all: the starting process itself was killed
        kind, message = "unreachable", f"the engine process ended with status {returncode}"
    what = f"could not start the embedded engine for {data_dir}: {message} (log: {data_dir / LOG_FILE})"
    if kind == "in_use":
        return InUse(what)
    if kind == "unreachable":
        return StorageError(what, advice="retry once the cause in its log is gone")
    return ConfigError(what)


def lease(data_dir: Path, idle_stop_s: float) -> EngineLease:
    """The running engine of `data_dir` (started if needed), with the start lock held."""
    secure_dir(data_dir)
    lock = open_lock(data_dir / START_LOCK)
    try:
        held = data_dir / START_LOCK
        lock_within(lock, START_TIMEOUT_S, f"{held}", hint=f"`fuser {held}`")
        password = credentials(data_dir)
        started = False
        if not engine_running(data_dir):
            started = spawn(data_dir, idle_stop_s)
        state = status(data_dir)
        deadline = time.monotonic() + START_TIMEOUT_S
        while state is None and engine_running(data_dir) and time.monotonic() < deadline:
            time.sleep(0.05)  # an engine started by hand (no start lock) has not published yet
            state = status(data_dir)
        if state is None:
            raise _unpublished(data_dir)
        return EngineLease(state, state.uri(password), started, lock)
    except BaseException:
        lock.close()
        raise


def _unpublished(data_dir: Path) -> MongogateError:
    """No engine to connect to after a start: one holds engine.lock but never published (InUse),
    or none runs any more (it stopped while starting: a runtime failure, StorageError)."""
    if engine_running(data_dir):
        pid = lock_pid(data_dir)
        return InUse(
            f"{data_dir / ENGINE_LOCK} is held by another process{f' (pid {pid})' if pid else ''} that "
            f"published no {STATE_FILE} within {START_TIMEOUT_S:.0f} s: an engine stuck while starting? "
            f"`fuser {data_dir / ENGINE_LOCK}` names it: end it, then start again"
        )
    return StorageError(
        f"the engine of {data_dir} stopped while starting", advice=f"see {data_dir / LOG_FILE}, then retry"
    )


def status(data_dir: Path) -> EngineState | None:
    """The published state of a running engine, or None (not running, crashed, or still starting).

    engine.json counts only when it names the pid that holds engine.lock: a crashed engine's
    file names a pid that may since belong to any process (which `stop` would signal).
    """
    if not engine_running(data_dir):
        return None
    state = read_state(data_dir)
    return state if state is not None and state.pid == lock_pid(data_dir) else None


def owner_uri(data_dir: Path) -> str | None:
    """The full URI with credentials: readable only by whoever can read the 0600 credentials file."""
    state = status(data_dir)
    return state.uri(credentials(data_dir)) if state is not None else None


def stop(data_dir: Path, timeout_s: float = START_TIMEOUT_S) -> bool:
    """SIGTERM the engine and wait until it let go of engine.lock; False when none was running."""
    state = status(data_dir)
    if state is None:
        return False
    try:
        os.kill(state.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass  # it is exiting already
    except PermissionError as e:
        raise ConfigError(f"the engine of {data_dir} (pid {state.pid}) belongs to another user") from e
    with open_lock(data_dir / ENGINE_LOCK) as lock:
        lock_within(lock, timeout_s, f"the engine of {data_dir} (pid {state.pid}) to stop")
    return True


def wait_stopped(data_dir: Path, timeout_s: float) -> bool:
    """Poll until no engine runs (tests, after an idle period); True when it stopped in time."""
    deadline = time.monotonic() + timeout_s
    while engine_running(data_dir):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
