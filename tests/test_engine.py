"""The engine process of a data directory: private, one per directory, restarted after a crash.

Real processes: each test's engine is a detached `python -m mongogate.engine` process, stopped
at the end of the test. Waits poll a file or a lock with a generous cap; none is a margin.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from mongogate.cli import main
from mongogate.config import DatabaseSettings
from mongogate.db import Database
from mongogate.engine import client as engine_client
from mongogate.engine.files import STATE_FILE, socket_uri

CAP_S = 60.0


def _config(tmp_path: Path, data: Path, idle: float = 300) -> Path:
    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(f'[database]\nname = "e"\nengine_idle_stop_s = {idle}\n[server]\ndata_dir = "{data}"\n')
    return cfg


def _until(what: str, check: object) -> None:
    deadline = time.monotonic() + CAP_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} did not happen within {CAP_S} s"
        time.sleep(0.05)


def test_engine_refuses_connections_without_credentials_and_keeps_its_files_private(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a directory left world-readable by an older version is tightened at start
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    (data / "audit.jsonl").write_text("")
    os.chmod(data / "audit.jsonl", 0o644)
    cfg = _config(tmp_path, data)
    assert main(["engine", "start", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    state = engine_client.status(data)
    assert state is not None
    assert (
        f"pid {state.pid}, address {data.resolve() / 'engine.sock'}" in out and "credentials: required" in out
    )

    # the owner's own processes can reach the socket; without the password they get nothing
    anonymous: MongoClient[dict[str, object]] = MongoClient(
        socket_uri(state.socket), serverSelectionTimeoutMS=5000
    )
    wrong: MongoClient[dict[str, object]] = MongoClient(
        socket_uri(state.socket, "guess"), serverSelectionTimeoutMS=5000
    )
    try:
        for attempt in (
            lambda: anonymous.admin.command("ping"),
            lambda: anonymous.e.sessions.find_one(),
            lambda: anonymous.e.sessions.insert_one({"x": 1}),
            lambda: anonymous.list_database_names(),
        ):
            with pytest.raises(OperationFailure, match="Authentication required"):
                attempt()
        with pytest.raises(OperationFailure, match="Authentication failed"):
            wrong.admin.command("ping")
    finally:
        anonymous.close()
        wrong.close()

    assert main(["engine", "status", "--uri", "--config", str(cfg)]) == 0
    uri = capsys.readouterr().out.strip()
    owner: MongoClient[dict[str, object]] = MongoClient(uri, serverSelectionTimeoutMS=5000)
    try:
        owner.e.notes.insert_one({"x": 1})  # the SQLite file and its WAL now exist
        assert owner.e.notes.count_documents({}) == 1
    finally:
        owner.close()
    assert data.stat().st_mode & 0o777 == 0o700
    files = {p.name: p.stat().st_mode & 0o777 for p in data.iterdir()}
    for name in ("engine.credentials", "engine.json", "engine.lock", "engine.start.lock", "engine.log"):
        assert name in files
    assert "mongogate.sqlite3" in files and "audit.jsonl" in files
    assert files == dict.fromkeys(files, 0o600), files
    assert "password" not in (data / STATE_FILE).read_text()  # the state file holds no secret


def test_processes_racing_to_start_the_engine_end_with_one(data: Path) -> None:
    n = 4
    barrier = threading.Barrier(n)
    pids: list[int] = []
    started: list[bool] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            barrier.wait()
            lease = engine_client.lease(data, 300)
            lease.release()
            pids.append(lease.state.pid)
            started.append(lease.started)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(pids)) == 1 and started.count(True) == 1

    # two engine processes started directly, past the start lock: the second one steps aside
    run = [sys.executable, "-m", "mongogate.engine", "run", "--detach", "--data-dir", str(data)]
    again = subprocess.run(run, capture_output=True, text=True, timeout=CAP_S, check=False)
    assert again.returncode == 3
    assert engine_client.status(data) is not None and engine_client.status(data).pid == pids[0]  # type: ignore[union-attr]


def test_a_crashed_engine_is_restarted_by_the_next_process_on_its_socket(data: Path) -> None:
    first = engine_client.lease(data, 300)
    first.release()
    client: MongoClient[dict[str, object]] = MongoClient(first.uri, serverSelectionTimeoutMS=5000)
    client.e.notes.insert_one({"_id": 1})
    os.kill(first.state.pid, signal.SIGKILL)
    _until("the engine to die", lambda: engine_client.status(data) is None)
    assert (data / STATE_FILE).exists()  # a crash leaves its state behind

    second = engine_client.lease(data, 300)
    second.release()
    try:
        assert second.started and second.state.pid != first.state.pid
        assert second.state.address == first.state.address  # the same socket: old clients reconnect
        assert client.e.notes.find_one({"_id": 1}) == {"_id": 1}
    finally:
        client.close()


def test_a_running_process_restarts_its_crashed_engine(data: Path) -> None:
    async def scenario() -> None:
        db = Database(DatabaseSettings(name="watch", timeout_ms=2000), data)
        await db.open()
        try:
            assert db.engine_state is not None
            crashed = db.engine_state.pid
            await db.memory["notes"].insert_one({"_id": 1})
            os.kill(crashed, signal.SIGKILL)
            deadline = time.monotonic() + CAP_S
            while True:  # calls fail until the watchdog has restarted the engine, then succeed
                try:
                    assert await db.memory["notes"].count_documents({}) == 1
                    break
                except Exception:
                    assert time.monotonic() < deadline, "the engine was not restarted"
                    await anyio.sleep(0.2)
            state = engine_client.status(data)
            assert state is not None and state.pid != crashed
        finally:
            await db.close()

    anyio.run(scenario)


def test_an_idle_engine_stops_and_status_says_so(
    tmp_path: Path, data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = _config(tmp_path, data, idle=0.2)
    assert main(["engine", "start", "--config", str(cfg)]) == 0
    assert main(["engine", "status", "--json", "--config", str(cfg)]) == 0
    info = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert info["running"] is True and info["idle_stop_s"] == 0.2 and info["auth"] == "SCRAM-SHA-256"
    # nobody connects: it stops by itself and removes its state file
    assert engine_client.wait_stopped(data, CAP_S)
    assert not (data / STATE_FILE).exists()
    assert main(["engine", "status", "--config", str(cfg)]) == 1
    assert "engine: not running" in capsys.readouterr().out
    assert main(["engine", "status", "--uri", "--config", str(cfg)]) == 2

    cfg = _config(tmp_path, data)
    assert main(["engine", "start", "--config", str(cfg)]) == 0
    assert main(["engine", "stop", "--config", str(cfg)]) == 0
    assert "engine: stopped" in capsys.readouterr().out
    assert engine_client.status(data) is None


def test_an_engine_that_stops_the_moment_it_is_idle_never_strands_a_process(data: Path) -> None:
    """idle_stop_s = 0: the engine stops whenever its last client leaves, while new processes
    keep arriving. Each finds a running engine or starts one; none is left with a vanished one."""

    async def one(i: int) -> None:
        # a generous server selection: a freshly started engine on a loaded machine may answer late
        db = Database(DatabaseSettings(name="churn", engine_idle_stop_s=0, timeout_ms=30_000), data)
        await db.open()
        try:
            await db.memory["notes"].insert_one({"_id": i})
        finally:
            await db.close()

    async def churn() -> None:
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(one, i)
        for i in range(3, 6):
            await one(i)

    anyio.run(churn)
    lease = engine_client.lease(data, 300)
    lease.release()
    client: MongoClient[dict[str, object]] = MongoClient(lease.uri, serverSelectionTimeoutMS=5000)
    try:
        assert sorted(d["_id"] for d in client.churn.notes.find()) == list(range(6))  # type: ignore[type-var]
    finally:
        client.close()
