"""Issue 9.1: two worker processes on one shared engine, one killed with SIGKILL mid-tick.

The tick a worker has claimed is never run again by the other (a claim comes before the run),
and the survivor keeps the schedule: the following slots run, each once. Real processes on the
embedded engine process of one data directory; waits poll the database with a generous cap.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from mongogate.engine import client as engine_client
from tests.helpers import EXE, ROOT

pytestmark = pytest.mark.timeout(300)

CAP_S = 120.0

AGENTS = """
import itertools
import os
import anyio
from pymongo.errors import DuplicateKeyError
from mongogate.scheduler import AgentRegistry
agents = AgentRegistry()

# max_running=2: the survivor's next tick may start while the killed one's claim is live
# (the default, 1, would hold the agent until that claim's 60 s deadline + grace)
@agents.agent('beat', every=1, max_running=2)
async def beat(ctx):
    await ctx.db['ticks'].insert_one({'slot': ctx.scheduled_at, 'pid': os.getpid()})
    try:  # the first tick of all hangs until its worker is killed
        await ctx.db['victim'].insert_one({'_id': 'victim', 'pid': os.getpid(), 'slot': ctx.scheduled_at})
    except DuplicateKeyError:
        return
    await anyio.sleep(3600)
"""


def test_two_workers_one_killed_mid_tick_no_tick_runs_twice(tmp_path: Path, data: Path) -> None:
    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(
        f'[database]\nname = "fleet"\n[server]\ndata_dir = "{data}"\n'
        "[scheduler]\njitter_max_s = 0\nspread = false\ntick_timeout_s = 60\nidle_sleep_s = 0.05\n"
    )
    (tmp_path / "fleet.py").write_text(AGENTS)
    env = {**os.environ, "MONGOGATE_CONFIG": str(cfg)}
    env.pop("MONGOGATE_DATABASE__URI", None)
    lease = engine_client.lease(data, 300)  # one engine for both, started ahead
    lease.release()
    cmd = [*EXE, "worker", "--agents", f"{tmp_path / 'fleet.py'}:agents", "--no-entry-points"]
    workers = [
        subprocess.Popen(
            [*cmd, "--worker-id", f"w{i}"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(2)
    ]
    db: Any = MongoClient(lease.uri, tz_aware=True)["fleet"]
    try:
        victim = _wait(lambda: db.victim.find_one({"_id": "victim"}), "a tick to start")
        [dead] = [w for w in workers if w.pid == victim["pid"]]
        [survivor] = [w for w in workers if w is not dead]
        dead.kill()  # SIGKILL in the middle of its tick
        assert dead.wait() == -signal.SIGKILL
        _wait(
            lambda: db.ticks.count_documents({"pid": survivor.pid, "slot": {"$gt": victim["slot"]}}) >= 3,
            "the survivor to run three more slots",
        )
        survivor.send_signal(signal.SIGTERM)
        assert survivor.wait(timeout=CAP_S) == 0

        ticks = list(db.ticks.find({}, {"_id": 0}).sort("slot", 1))
        slots = [t["slot"] for t in ticks]
        assert len(slots) == len(set(slots)), "a tick ran twice"
        assert [t["pid"] for t in ticks if t["slot"] > victim["slot"]] == [survivor.pid] * len(
            [s for s in slots if s > victim["slot"]]
        )
        assert db.ticks.count_documents({"slot": victim["slot"]}) == 1  # the killed tick was not rerun
        later = [s for s in slots if s > victim["slot"]]
        assert all((b - a).total_seconds() >= 1 for a, b in itertools.pairwise(later))
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        db.client.close()


def _wait(probe: Any, what: str) -> Any:
    deadline = time.monotonic() + CAP_S
    while not (found := probe()):
        assert time.monotonic() < deadline, f"{what}: not within {CAP_S} s"
        time.sleep(0.05)
    return found
