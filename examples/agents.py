"""Example agents for `mongogate worker`: periodic work on MongoDB alone, no broker.

    mongogate worker --agents examples/agents.py:agents            # run them (Ctrl-C stops)
    mongogate worker --agents examples/agents.py:agents --duration 30
    mongogate worker --status                                      # state, lag, missed slots, last error

Start as many workers as you like: each due tick runs once across all of them. A package
can ship agents too, with an entry point::

    [project.entry-points."mongogate.agents"]
    shop = "shop.agents:agents"
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bson import ObjectId

from mongogate import AgentRegistry, LeaseBusy, TickContext

agents = AgentRegistry()

#: a run still "running" whose lease lapsed this long ago was abandoned by its worker
STALE_AFTER = timedelta(minutes=10)
#: runs of this example's own batch job belong to this tenant
SYSTEM_TENANT = "_system"


@agents.agent("heartbeat", every=30)
async def heartbeat(ctx: TickContext) -> None:
    """The smallest agent: say it ran, and how late."""
    ctx.log.info(
        "tick due %s ran %.3f s late on %s", ctx.scheduled_at.isoformat(), ctx.drift_s, ctx.worker_id
    )


@agents.agent("stale-runs", every=60, timeout_s=20)
async def stale_runs(ctx: TickContext) -> None:
    """Open one investigation per abandoned run; close it once the run moves on.

    Two workers can never open two items for the same run: the investigations' partial unique
    index lets one active item exist per (tenant, agent, trigger), and the loser gets it back
    as "already_open".
    """
    now = ctx.clock.now()
    cutoff = now - STALE_AFTER
    runs = ctx.db["runs"]
    abandoned = runs.find(
        {
            "status": "running",
            "$or": [
                {"locked_until": {"$lt": cutoff}},
                {"locked_until": None, "updated_at": {"$lt": cutoff}},
            ],
        },
        {"tenant": 1, "run_id": 1, "version": 1, "locked_until": 1},
        limit=100,
    )
    async for run in abandoned:
        result = await ctx.investigations.open(
            run["tenant"],
            ctx.agent_key,
            f"stale-run:{run['run_id']}",
            title=f"run {run['run_id']} stopped at version {run['version']}",
            details={"run_id": run["run_id"], "version": run["version"]},
        )
        if result.status == "opened":
            ctx.log.warning("run %s of %s looks abandoned", run["run_id"], run["tenant"])

    # Close the items whose run completed, failed, or was picked up again.
    for item in await ctx.investigations.list_for_agent(ctx.agent_key, limit=100):
        run_id = item.details.get("run_id")
        current = await runs.find_one({"tenant": item.tenant, "run_id": run_id})
        until = current.get("locked_until") if current else None
        held = until is not None and until > now  # the database returns aware UTC datetimes
        if current is None or current["status"] != "running" or held:
            why = (
                "run is gone"
                if current is None
                else "run was resumed"
                if held
                else f"run is {current['status']}"
            )
            await ctx.investigations.close(item.tenant, item.id, why)


@agents.agent("message-digest", every=300, timeout_s=120)
async def message_digest(ctx: TickContext) -> None:
    """Count messages per tenant, one page at a time, checkpointing after each page.

    One run per day: a worker that dies (or a tick cut at its deadline) leaves the last
    checkpoint behind, and the next tick, on whichever worker, resumes from it.
    """
    run_id = f"message-digest-{ctx.scheduled_at:%Y-%m-%d}"
    try:
        lease = await ctx.runs.acquire(SYSTEM_TENANT, run_id, lease_ms=60_000)
    except LeaseBusy:
        return  # another worker is on it (a previous tick that is still running)
    try:
        if lease.status == "completed":
            return
        checkpoint = await ctx.runs.load_checkpoint(SYSTEM_TENANT, run_id)
        state: dict[str, Any] = checkpoint.state or {"after": None, "counts": {}}
        version = checkpoint.version
        messages = ctx.db["messages"]
        while True:
            query = {} if state["after"] is None else {"_id": {"$gt": ObjectId(state["after"])}}
            page = await messages.find(query, {"tenant": 1}, sort=[("_id", 1)], limit=500).to_list()
            if not page:
                break
            for m in page:
                tenant = str(m.get("tenant"))
                state["counts"][tenant] = state["counts"].get(tenant, 0) + 1
            state["after"] = str(page[-1]["_id"])
            version += 1
            # Raises LeaseLost if another worker took the run over: then this tick must stop.
            await ctx.runs.save_checkpoint(SYSTEM_TENANT, run_id, lease.lease_id, version, state)
            await ctx.runs.heartbeat(SYSTEM_TENANT, run_id, lease.lease_id, 60_000)
        await ctx.runs.save_checkpoint(SYSTEM_TENANT, run_id, lease.lease_id, version + 1, state, "completed")
        ctx.log.info("message digest %s: %s", run_id, state["counts"])
    finally:
        await ctx.runs.release(SYSTEM_TENANT, run_id, lease.lease_id)
