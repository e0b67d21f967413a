"""Every collection mongogate writes is declared by a package (`ERASURE` in its `erase.py`,
composed by `assembly.erasure_plan`): removed or redacted per tenant, or kept with a reason. A
package that adds a collection (a message index is coming) and does not declare it fails here:
the deployment below is written through every part that stores something (a served MCP server
with every tool family, the audit trail's MongoDB sink, a scheduler worker, the framework
adapters, an unfinished erasure's journal), and any collection it holds that no package
declared is named."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mongogate.assembly import erasure_plan
from mongogate.clock import ManualClock
from mongogate.demo import DEMO_SPECS
from mongogate.scheduler import Agent, Scheduler, TickContext
from tests.erase_world import TENANT_HELD, Mongo, erase_cli, seed, world_settings
from tests.scheduler.helpers import T0, cfg

pytestmark = pytest.mark.anyio


async def run_a_worker(mongo: Mongo, db_name: str) -> None:
    """One tick of one agent that opens an investigation (its schedule and the worker recorded)."""
    ticked = anyio.Event()

    async def watch(ctx: TickContext) -> None:
        await ctx.investigations.open("acme", ctx.agent_key, "late-orders", title="late")
        ticked.set()

    worker = Scheduler(
        mongo[db_name], [Agent("watch", watch, 60)], cfg(concurrency=1), "w", clock=ManualClock(T0)
    )
    with anyio.fail_after(60):  # a hang guard only
        async with anyio.create_task_group() as tg:
            stop = anyio.Event()
            tg.start_soon(worker.run, stop)
            await ticked.wait()
            stop.set()


async def test_every_collection_a_deployment_holds_is_declared_by_a_package(
    engine_uri: str, db_name: str, tmp_path: Path, mongo: Mongo
) -> None:
    settings = world_settings(engine_uri, db_name, tmp_path)
    await seed(settings)
    await run_a_worker(mongo, db_name)
    killed = erase_cli(
        engine_uri, db_name, tmp_path, "--tenant", "acme", crash="erase.after_journal:removed:sessions"
    )
    assert killed.returncode == 137, killed.stderr  # its journal is left behind
    held = set(await mongo[db_name].list_collection_names())
    application = {spec.collection for spec in DEMO_SPECS}  # what the query tools read: the user's
    declared = [name for d in erasure_plan() for name in d.collections()]
    expected = TENANT_HELD | {"memory_meta", "agent_schedule", "agent_workers", "erasures"}
    assert expected <= held - application  # the deployment wrote every kind
    undeclared = held - application - set(declared)
    assert not undeclared, f"collections no package declares in its erase.py: {sorted(undeclared)}"


def test_each_package_declares_each_collection_once_with_a_reason_for_what_it_keeps() -> None:
    plan = erasure_plan()
    assert [d.package for d in plan] == ["memory", "recall", "runs", "scheduler", "audit", "assembly"]
    kept = [k for d in plan for k in d.kept]
    erased = {p.collection for d in plan for p in d.parts}
    assert len({k.collection for k in kept}) == len(kept) and not erased & {k.collection for k in kept}
    assert all(k.why for k in kept)
