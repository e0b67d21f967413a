"""What the scheduler tests share: the start of their ManualClock, a tick that does nothing, the
settings their schedulers run with, and the config file of the `worker` command tests."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient

from mongogate.config import SchedulerSettings
from mongogate.scheduler.agents import TickContext

Client = AsyncMongoClient[dict[str, Any]]
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
