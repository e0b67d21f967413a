"""An embedded-engine start that fails exits with the status of what failed (engine/failure.py):
2 when the data directory is wrong, 4 when another process holds a lock past its bound, 3 when
the engine fails or dies while starting. Before, every one exited 2, "invalid configuration",
and sent the operator to the configuration where ending a process or retrying is what helps.

Real processes (`mongogate engine start`, `serve`, the detached engine), real locks held by
the test process; the two bounds of 120 s are set to 0 in-process instead of waited for."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mongogate.cli import main
from mongogate.engine import client as engine_client
from mongogate.engine import write_signal
from mongogate.engine.files import (
    DB_FILE,
    ENGINE_LOCK,
    LOG_FILE,
    START_LOCK,
    engine_running,
    lock_pid,
    open_lock,
    try_lock,
)
from mongogate.engine.write_signal import FILE, prepare
from mongogate.errors import StorageError
from tests.helpers import EXE, ROOT, free_port
from tests.test_engine_write_signal import MUTEX_HOLDER, another_process

#: engine processes and data directories; interpreters and a 5 s lock bound, on one busy core
pytestmark = [pytest.mark.embedded_engine, pytest.mark.timeout(240)]


def _env(tmp_path: Path, data: Path) -> dict[str, str]:
    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(f'[database]\nname = "e"\n[server]\ndata_dir = "{data}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    return env | {"MONGOGATE_CONFIG": str(cfg), "MONGOGATE_AUTH__TENANT": "acme"}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EXE, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=200, check=False
    )


@contextlib.contextmanager
def _damaged_db(data: Path) -> Iterator[None]:
    (data / DB_FILE).write_bytes(b"not a database, " * 512)  # a runtime failure: SQLite cannot open it
    yield


@contextlib.contextmanager
def _held_signal(data: Path) -> Iterator[None]:
    path = prepare(data)
    assert path is not None
    with another_process(MUTEX_HOLDER, str(path), ready="holding"):  # a writer stopped in an addition
        yield


@contextlib.contextmanager
def _long_dir(data: Path) -> Iterator[None]:
    yield  # `data` itself is too long for the socket: a configuration problem


SERVE = ("serve", "--http", "--insecure-no-auth", "--port")
HELD = f"the write signal {{data}}/{FILE} is locked by another process"
Setup = Callable[[Path], contextlib.AbstractContextManager[None]]


@pytest.mark.parametrize(
    ("setup", "command", "status", "says"),
    [
        pytest.param(_damaged_db, ("engine", "start"), 3, "file is not a database", id="damaged-db-start"),
        pytest.param(_damaged_db, SERVE, 3, "file is not a database", id="damaged-db-serve"),
        pytest.param(
            _held_signal,
            ("engine", "start"),
            4,
            f"the write signal {{data}}/{FILE} is locked",
            id="held-signal-start",
        ),
        pytest.param(_long_dir, ("engine", "start"), 2, "is too long for the engine's socket", id="long-dir"),
    ],
)
def test_a_failed_engine_start_exits_with_what_failed(
    tmp_path: Path,
    setup: Callable[[Path], contextlib.AbstractContextManager[None]],
    command: tuple[str, ...],
    status: int,
    says: str,
) -> None:
    """The command ends with one line naming the data directory and the cause, and the status of
    its kind (docs/operations.md, "Exit statuses"); no engine is left behind."""
    if setup is _held_signal and not write_signal.supported():
        pytest.skip("no OFD locks on this platform")
    data = (tmp_path / ("d" * 110 if setup is _long_dir else "data")).resolve()
    data.mkdir(mode=0o700)
    args = (*command, str(free_port())) if command == SERVE else command
    try:
        with setup(data):
            done = _run(_env(tmp_path, data), *args)
    finally:
        engine_client.stop(data)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == status, done.stderr
    assert lines[-1].startswith(f"mongogate: could not start the embedded engine for {data}: "), lines
    assert says.format(data=data) in lines[-1], lines[-1]
    assert not engine_running(data)


@pytest.mark.parametrize("name", [ENGINE_LOCK, START_LOCK])
def test_a_lock_file_that_is_a_directory_is_one_line_and_2_not_a_traceback(tmp_path: Path, name: str) -> None:
    """Something other than a regular file at one of the engine's lock files (a directory made
    by hand or by a bad copy) is the data directory's fault: one line naming the file, exit 2
    (it was a traceback from `os.open` and exit 1, a status only `check` and `try` give)."""
    data = (tmp_path / "data").resolve()
    data.mkdir(mode=0o700)
    (data / name).mkdir()
    done = _run(_env(tmp_path, data), "engine", "start")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"mongogate: {data / name} is not a regular file: remove it (mongogate keeps only its own "
        "files there)"
    )
    (data / name).rmdir()
    assert not engine_running(data)


def test_an_engine_killed_while_starting_exits_3_and_names_its_log(tmp_path: Path, data: Path) -> None:
    """The engine process dies before it could say why (the OOM killer, a signal): its starter
    hears nothing from it, a runtime failure, 3. Here its SQLite file is a FIFO, so the engine
    stays inside opening it (after writing its pid into engine.lock) until the test kills it."""
    data.mkdir(mode=0o700)
    os.mkfifo(data / DB_FILE, 0o600)
    with subprocess.Popen(
        [*EXE, "engine", "start"], env=_env(tmp_path, data), cwd=ROOT, stderr=subprocess.PIPE, text=True
    ) as starting:
        deadline = time.monotonic() + 120  # a cap on a busy machine; the engine waits for as long
        while (pid := lock_pid(data)) is None:
            assert time.monotonic() < deadline and starting.poll() is None, "the engine never started"
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        _, err = starting.communicate(timeout=120)
    [line] = err.strip().splitlines()
    assert starting.returncode == 3, err
    assert line.startswith(
        f"mongogate: could not start the embedded engine for {data.resolve()}: the engine process exited "
        f"while starting (log: {data.resolve() / LOG_FILE}): retry once the cause in its log is gone"
    ), line


@pytest.fixture
def no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """The start's 120 s bound on a lock held by another process, reached at once."""
    monkeypatch.setattr(engine_client, "START_TIMEOUT_S", 0.0)


@pytest.mark.parametrize(
    ("held", "says"),
    [
        pytest.param(START_LOCK, "is held by another process for more than 0 s", id="start-lock"),
        pytest.param(  # an engine stuck while starting
            ENGINE_LOCK, "is held by another process that published no engine.json", id="engine-lock"
        ),
    ],
)
def test_a_lock_held_past_its_bound_exits_4_naming_the_lock_and_how_to_find_its_holder(
    tmp_path: Path, data: Path, no_wait: None, held: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another process (here: the test, through its own open file) holds the lock."""
    data.mkdir(mode=0o700)
    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(f'[database]\nname = "e"\n[server]\ndata_dir = "{data}"\n')
    with open_lock(data / held) as lock:
        assert try_lock(lock)
        assert main(["engine", "start", "--config", str(cfg)]) == 4
    [line] = capsys.readouterr().err.strip().splitlines()
    path = data.resolve() / held
    assert line.startswith(f"mongogate: {path} {says}") and f"`fuser {path}` names it" in line, line


def test_plain_text_from_an_older_engine_process_is_still_a_configuration_error(tmp_path: Path) -> None:
    """Mid-upgrade, a starter may read an engine process of the version before: its last line is
    text, not a kind; it reads as before (a ConfigError with that text), never as a crash."""
    from mongogate.engine.client import _failed

    err = _failed(tmp_path, ["engine failed to start: something an older engine process said"], 1)
    assert err.exit_status == 2 and "something an older engine process said" in str(err)


def test_an_engine_that_never_answers_its_start_is_one_line_and_3_not_a_traceback(tmp_path: Path) -> None:
    """The detached start says nothing within its bound (an engine stuck while starting, a
    machine under heavy load): a runtime failure, 3, in one line naming the log. Before, the
    `subprocess.TimeoutExpired` escaped: a traceback and exit status 1. The start command here is
    a real process that never answers (it sleeps), with a bound of 0.5 s."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    never = [sys.executable, "-c", "import time; time.sleep(600)"]
    with pytest.raises(StorageError) as refused:
        engine_client.spawn(data, 60.0, command=never, timeout_s=0.5)
    assert refused.value.exit_status == 3
    assert str(refused.value) == (
        f"could not start the embedded engine for {data}: it did not say it was serving within 0.5 s "
        f"(log: {data / LOG_FILE}): see its log; `mongogate engine status` tells whether it came up later"
    )
