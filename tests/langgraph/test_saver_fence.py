"""The saver's fence: a second process resuming a held thread fails before any node runs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.graph", reason="needs the extra: pip install 'mongogate[langgraph]'")

from langgraph.types import Command

from mongogate.clock import ManualClock
from mongogate.errors import LeaseBusy, LeaseLost
from mongogate.langgraph import MongogateSaver
from tests.conftest import make_settings
from tests.langgraph.resumer import build

ROOT = Path(__file__).resolve().parents[2]


def _resumer(args: list[str], err: Path) -> subprocess.Popen[bytes]:
    """The resumer in a process of its own; its stderr goes to `err` (no pipe left open)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with err.open("wb") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.langgraph.resumer", *args], cwd=ROOT, env=env, stdout=f, stderr=f
        )


def _wait_for(path: Path, proc: subprocess.Popen[bytes], err: Path) -> None:
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"the first resumer ended early: {err.read_text()}")
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.02)


def test_a_second_process_resuming_a_held_thread_fails_before_any_node_runs(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    effects, barrier = tmp_path / "effects.txt", tmp_path / "barrier"
    barrier.mkdir()
    args = [engine_uri, db_name, str(tmp_path / "data"), "order-7", str(effects), str(barrier)]
    logs = [tmp_path / f"{name}.log" for name in ("start", "first", "second")]
    start = _resumer([*args, "start"], logs[0])
    assert start.wait(60) == 0, logs[0].read_text()
    assert not effects.exists()  # stopped at the interrupt

    first = _resumer([*args, "resume"], logs[1])
    try:
        _wait_for(barrier / "started", first, logs[1])  # the first resume is inside `effect`, holding it
        second = _resumer([*args, "resume"], logs[2])
        assert second.wait(60) == 3, logs[2].read_text()
        assert "[lease_busy]" in logs[2].read_text(), logs[2].read_text()
    finally:
        (barrier / "go").write_text("1")
        first_status = first.wait(60)
    assert first_status == 0, logs[1].read_text()
    assert effects.read_text() == "paid yes\n"  # the side effect ran once


def test_the_holder_travels_back_to_an_earlier_checkpoint_and_another_saver_is_fenced(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    effects = tmp_path / "effects.txt"
    config: Any = {"configurable": {"thread_id": "t-travel"}}
    with MongogateSaver.open(settings, tenant="acme") as saver:
        graph = build(effects, None).compile(checkpointer=saver)
        graph.invoke({}, config)
        graph.invoke(Command(resume="first"), config)
        assert graph.get_state(config).values == {"approved": "first", "done": True}
        history = list(graph.get_state_history(config))
        before_effect = next(s for s in history if s.next == ("effect",))
        # time travel: replay from the checkpoint before `effect`, and fork with another approval
        graph.invoke(None, before_effect.config)
        forked = graph.update_state(before_effect.config, {"approved": "second"})
        graph.invoke(None, forked)
        assert graph.get_state(config).values == {"approved": "second", "done": True}
        with MongogateSaver.open(settings, tenant="acme") as other, pytest.raises(LeaseBusy):
            other.get_tuple(config)
    assert effects.read_text() == "paid first\npaid first\npaid second\n"
    with MongogateSaver.open(settings, tenant="acme") as later:  # closed: the thread is free again
        assert later.get_tuple(config) is not None


def test_another_tenants_thread_looks_like_none(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    config: Any = {"configurable": {"thread_id": "shared-name"}}
    with MongogateSaver.open(settings, tenant="acme") as acme:
        build(tmp_path / "e.txt", None).compile(checkpointer=acme).invoke({}, config)
        assert acme.get_tuple(config) is not None
    with MongogateSaver.open(settings, tenant="globex") as globex:
        assert globex.get_tuple(config) is None
        assert list(globex.list(None)) == []
        assert list(globex.list(config)) == []


def test_a_holder_whose_lease_expired_and_was_taken_over_cannot_write(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    clock = ManualClock()
    config: Any = {"configurable": {"thread_id": "t-stale"}}
    with MongogateSaver.open(settings, tenant="acme", clock=clock) as stale:
        build(tmp_path / "e.txt", None).compile(checkpointer=stale).invoke({}, config)
        latest = stale.get_tuple(config)
        assert latest is not None
        clock.advance(ms=settings.memory.lease_ms + 1)  # the holder stalled past its lease
        with MongogateSaver.open(settings, tenant="acme", clock=clock) as fresh:
            assert fresh.get_tuple(config) is not None  # takes the expired lease over
            with pytest.raises(LeaseLost):
                stale.put_writes(latest.config, [("approved", "late")], "task-1")
            with pytest.raises(LeaseBusy):  # and the stale saver cannot take it back meanwhile
                stale.get_tuple(config)


@pytest.mark.anyio
async def test_an_async_graph_run_holds_its_thread_too(engine_uri: str, db_name: str, tmp_path: Path) -> None:
    settings = make_settings(engine_uri, db_name, tmp_path)
    config: Any = {"configurable": {"thread_id": "t-async"}}
    with MongogateSaver.open(settings, tenant="acme") as saver:
        graph = build(tmp_path / "e.txt", None).compile(checkpointer=saver)
        await graph.ainvoke({}, config)
        await graph.ainvoke(Command(resume="async"), config)
        assert (await graph.aget_state(config)).values == {"approved": "async", "done": True}
        with MongogateSaver.open(settings, tenant="acme") as other:
            with pytest.raises(LeaseBusy):
                await other.aget_tuple(config)
            assert [t.checkpoint["id"] async for t in other.alist(config, limit=1)] == [
                (await saver.aget_tuple(config)).checkpoint["id"]  # type: ignore[union-attr]
            ]  # list reads without the lease
        await saver.arelease("t-async")
        with MongogateSaver.open(settings, tenant="acme") as after_release:
            assert await after_release.aget_tuple(config) is not None
