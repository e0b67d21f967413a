"""What the scheduler tests share: the start of their ManualClock, a tick that does nothing, the
settings their schedulers run with, the config file of the `worker` command tests, and whether a
worker process has frozen itself mid-tick."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pymongo import AsyncMongoClient

from mongogate.config import SchedulerSettings
from mongogate.scheduler.agents import TickContext

Client = AsyncMongoClient[dict[str, Any]]
ROOT = Path(__file__).parents[2]
T0 = datetime(2030, 1, 1, tzinfo=UTC)


async def noop(ctx: TickContext) -> None:
    return None


def cfg(**kw: Any) -> SchedulerSettings:
    """No start-up jitter and no spread (slots are where the test puts them: a new agent is due at
    registration), a deadline no tick here reaches."""
    base = {"jitter_max_s": 0, "spread": False, "tick_timeout_s": 30, "idle_sleep_s": 0.5}
    return SchedulerSettings(**{**base, **kw})


def config_file(tmp_path: Path, engine_uri: str, db_name: str) -> Path:
    """A mongogate.toml for the command line on the test's database (its data dir in tmp_path)."""
    path = tmp_path / "mongogate.toml"
    path.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n[server]\ndata_dir = "{tmp_path / "d"}"\n'
    )
    return path


def stopped(pid: int) -> bool:
    """Whether the process is stopped (state T in /proc): a worker frozen mid-tick by SIGSTOP."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def spawn_worker(
    tmp: Path, engine_uri: str, db_name: str, agents: str, worker_id: str, scheduler: str = ""
) -> subprocess.Popen[str]:
    """`mongogate worker` in a process of its own on the test's database, running the agents the
    Python source `agents` defines as `agents` (its `[scheduler]` lines in `scheduler`); its log
    on a pipe (stderr)."""
    tmp.mkdir(parents=True, exist_ok=True)
    conf = tmp / "mongogate.toml"
    conf.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n[server]\ndata_dir = "{tmp / "data"}"\n'
        + (f"[scheduler]\n{scheduler}" if scheduler else "")
    )
    (tmp / "fleet.py").write_text(agents)
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)
    cmd = [sys.executable, "-m", "mongogate.cli", "worker", "--config", str(conf), "--no-entry-points"]
    cmd += ["--agents", f"{tmp / 'fleet.py'}:agents", "--worker-id", worker_id]
    return subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )


def kill_once_frozen(proc: subprocess.Popen[str]) -> None:
    """Wait until the worker has frozen itself mid-tick (SIGSTOP), then SIGKILL it: no outcome is
    ever written and it never leaves the split."""
    try:
        for _ in range(1200):  # bounded: 2 minutes of 0.1 s polls, for a slow start-up only
            if proc.poll() is not None:
                pytest.fail(f"worker exited early: {proc.stderr.read() if proc.stderr else ''}")
            if stopped(proc.pid):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the worker never reached its tick")
    finally:
        proc.kill()
        proc.wait(timeout=60)
        if proc.stderr:
            proc.stderr.close()
