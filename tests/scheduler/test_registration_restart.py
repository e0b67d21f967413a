"""A worker stopped by SIGTERM in the middle of registering its agents, and the worker started after
it (issue 38): the second one finishes registering and runs.

What stalled it: the first worker's client, closing on SIGTERM, ended its session while one of its
inserts was inside the engine, between `BEGIN IMMEDIATE` and the write; the engine failed that
insert and then refused to roll it back for the ended session, so its shared connection stayed
in that transaction and every later write waited 5 s for the write lock (142 s without a write
with 5,000 agents). Here a failpoint in the engine (this process's, on its own thread) holds one
of the first worker's inserts right after its `BEGIN`, the first worker gets SIGTERM there, and
the insert goes on only once that worker has exited (its session ended): exactly the race, every
time. Real worker processes, a real signal; the only waits are hang guards.
"""

from __future__ import annotations

import queue
import signal
import threading
from pathlib import Path
from typing import Any

import pymongo
import pytest

from mongogate.compat import mongoeco
from mongogate.scheduler.core import SCHEDULE_COLLECTION
from tests.scheduler.helpers import spawn_worker

ROOT = Path(__file__).parents[2]
AGENTS = 200
AGENTS_FILE = f"""
from mongogate.scheduler import Agent

async def tick(ctx):
    return None

agents = [Agent(f"agent-{{i:05d}}", tick, 3600) for i in range({AGENTS})]
"""

pytestmark = pytest.mark.embedded_engine  # a failpoint inside the embedded engine of this process


class Worker:
    """A `mongogate worker` process and the lines of its log, read as they come."""

    def __init__(self, tmp: Path, engine_uri: str, db_name: str, worker_id: str) -> None:
        self.proc = spawn_worker(tmp, engine_uri, db_name, AGENTS_FILE, worker_id, "jitter_max_s = 0\n")
        self.log: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._lines.put(line)
        self._lines.put(None)

    def wait_for(self, text: str, timeout_s: float) -> None:
        """Until a log line holds `text`; fails on exit or past `timeout_s` (a hang guard)."""
        while True:
            try:
                line = self._lines.get(timeout=timeout_s)
            except queue.Empty:
                pytest.fail(f"no {text!r} within {timeout_s} s:\n" + "".join(self.log[-20:]))
            if line is None:
                pytest.fail(f"the worker exited before {text!r}:\n" + "".join(self.log[-20:]))
            self.log.append(line)
            if text in line:
                return

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=120)  # a hang guard only
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(timeout=30)
            if self.proc.stderr is not None:
                self.proc.stderr.close()


def test_a_worker_started_after_one_stopped_mid_registration_finishes_registering(
    engine_uri: str, db_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    began, release, armed = threading.Event(), threading.Event(), threading.Event()
    writes = 0
    original = getattr(mongoeco.FastIdEngine, mongoeco.BEGIN_WRITE)

    def held(self: Any, conn: Any, context: Any) -> None:
        """The 20th write once armed (an insert of the first batch) waits after its BEGIN."""
        nonlocal writes
        original(self, conn, context)
        if armed.is_set():
            writes += 1
            if writes == 20:
                began.set()
                release.wait(120)  # a hang guard only: the test releases it

    monkeypatch.setattr(mongoeco.FastIdEngine, mongoeco.BEGIN_WRITE, held)
    first = Worker(tmp_path / "first", engine_uri, db_name, "first")
    try:
        first.wait_for(f"registering {AGENTS} agents", 120)
        armed.set()
        assert began.wait(120), "the first worker's inserts never reached the engine"
        assert first.stop() == 0, "".join(first.log)  # exits while its insert is held
    finally:
        armed.clear()
        release.set()
    second = Worker(tmp_path / "second", engine_uri, db_name, "second")
    try:
        second.wait_for(f"running {AGENTS} agents", 90)
    finally:
        code = second.stop()
    assert code == 0
    with pymongo.MongoClient[dict[str, Any]](engine_uri) as client:
        assert client[db_name][SCHEDULE_COLLECTION].count_documents({}) == AGENTS
