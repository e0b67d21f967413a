"""A deployment with something of every kind stored for three principals, written through the
real parts (the MCP tools over HTTP with tokens, the scheduler's investigations, the audit
trail's MongoDB sink, the Agents SDK session, the LangGraph checkpointer), for the erasure
tests: acme/alice, acme/bob and globex/alice, with conversations and long-term memory per
subject (`[memory.long_term] scope = "subject"`).

`snapshot` reads every document of every collection, so a test can say what an erasure changed
and what it left exactly as it was."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from pymongo import AsyncMongoClient

from mongogate.cli.common import registry_for
from mongogate.config import Settings
from mongogate.scheduler import Investigations
from mongogate.server.app import build_server
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.http import BackgroundHttpServer
from tests import fault_harness
from tests.conftest import jwt_auth, make_settings
from tests.helpers import ROOT, failure, ok

PRINCIPALS = (("acme", "alice"), ("acme", "bob"), ("globex", "alice"))
#: the collections that hold a subject's documents once the world is seeded (each holds some)
SUBJECT_HELD = frozenset(
    {
        "sessions",
        "messages",
        "summaries",
        "session_revisions",
        "memories",
        "memory_versions",
        "memory_revisions",
        "audit_events",
        "message_revisions",
    }
)
#: held or not, as the server's background got to it before it stopped: what message search
#: derived from the messages (`message_index`); checked like the others when present
DERIVED = frozenset({"message_index"})
Mongo = AsyncMongoClient[dict[str, Any]]
HAS_LANGGRAPH = importlib.util.find_spec("langgraph") is not None
HAS_AGENTS = importlib.util.find_spec("agents") is not None
#: and a tenant's: its subjects' and its own (runs, investigations, LangGraph checkpoints)
TENANT_HELD = SUBJECT_HELD | {"runs", "run_events", "investigations"}
TENANT_HELD |= {"lg_checkpoints", "lg_writes"} if HAS_LANGGRAPH else set()


def world_settings(engine_uri: str, db_name: str, tmp: Path) -> Settings:
    return make_settings(
        engine_uri,
        db_name,
        tmp,
        auth=jwt_auth(),
        memory={"long_term": {"scope": "subject", "min_score": 0.0}},
        audit={"sink": "mongodb"},
    )


async def talk(c: Client, who: str) -> None:
    """One principal's conversation (2 turns, a summary), memories (one keyed, changed once: a
    version), a run with two checkpoints, and one refused query-tool call (an audit event)."""
    sid = str((await ok(c, "create_session", title=f"{who}'s"))["session_id"])
    for n, text in enumerate((f"{who} keeps the spare key under the blue pot", "and the alarm code?"), 1):
        t = await ok(c, "begin_turn", session_id=sid, turn_id=f"t{n}", text=text)
        await ok(c, "end_turn", session_id=sid, turn_id=f"t{n}", lease_id=t["lease_id"], reply="noted")
    await ok(c, "compact_context", session_id=sid, through_seq=2, summary=f"{who} told where the key is")
    await ok(c, "remember", text=f"{who} prefers tea with oat milk")
    await ok(c, "remember", text=f"{who} was born in Lisbon")
    await ok(c, "remember", text=f"{who}'s locker is 12", key="locker")
    await ok(c, "remember", text=f"{who}'s locker is 14", key="locker")
    run = "run-" + who.replace("/", "-")  # runs are the tenant's: one per subject here
    lease = (await ok(c, "acquire_run", run_id=run))["lease_id"]
    for v in (1, 2):
        await ok(c, "save_checkpoint", run_id=run, lease_id=lease, version=v, state={"step": v, "who": who})
    assert (await failure(c, "find_orders", filter={"$where": f"'{who}'"})).startswith("[")


async def seed(settings: Settings) -> None:
    server = build_server(settings, registry_for(settings, demo=True), transport="http")
    with BackgroundHttpServer(server) as http:
        for tenant, subject in PRINCIPALS:
            token = mint_dev_token(settings.auth, tenant=tenant, subject=subject, ttl_s=600)
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as hc,
                Client(streamable_http_client(http.url, http_client=hc)) as c,
            ):
                await talk(c, f"{tenant}/{subject}")
    # the server's lifespan ended: its audit queue is in audit_events
    async with Mongo(settings.database.uri or "", tz_aware=True) as client:
        db = client[settings.database.name]
        investigations = Investigations(db)
        for tenant in ("acme", "globex"):
            await investigations.open(tenant, "watcher", f"late-{tenant}", title="late orders")
    for tenant in ("acme", "globex"):
        if HAS_AGENTS:
            from mongogate.openai_agents import MongogateSession

            async with MongogateSession("chat-1", tenant=tenant, config=settings) as session:
                await session.add_items([{"role": "user", "content": f"hello from {tenant}"}])
        if HAS_LANGGRAPH:
            from langgraph.checkpoint.base import empty_checkpoint

            from mongogate.langgraph import MongogateSaver

            with MongogateSaver.open(settings, tenant=tenant) as saver:
                config: Any = {"configurable": {"thread_id": "th1", "checkpoint_ns": ""}}
                stored = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
                saver.put_writes(stored, [("messages", f"hi {tenant}")], "task-1")
                saver.release("th1")


async def snapshot(mongo: Mongo, db_name: str) -> dict[str, dict[Any, dict[str, Any]]]:
    """Every document of every collection, by `_id` (the erasure's journal left out)."""
    db = mongo[db_name]
    out: dict[str, dict[Any, dict[str, Any]]] = {}
    for name in sorted(await db.list_collection_names()):
        out[name] = {d["_id"]: d async for d in db[name].find({})}
    return out


def of_tenant(name: str, doc: dict[str, Any], tenant: str) -> bool:
    """Whether a stored document is the tenant's, read from the document itself (not from the
    erasure's declarations): its `tenant` field, or its `_id` for a revision document."""
    if name == "memory_revisions":
        return str(doc["_id"]).startswith(f"{len(tenant)}:{tenant}:")
    if name in ("session_revisions", "message_revisions"):  # `_id`: a conversation scope's stored tenant
        held = doc["_id"]
        return isinstance(held, str) and (held == tenant or held.startswith(tenant + "\x1f"))
    held = doc.get("tenant")
    return isinstance(held, str) and (held == tenant or held.startswith(tenant + "\x1f"))


def of_subject(name: str, doc: dict[str, Any], tenant: str, subject: str) -> bool:
    if name == "memory_revisions":
        return str(doc["_id"]) == f"{len(tenant)}:{tenant}:{subject}"
    if name == "message_revisions":
        return str(doc["_id"]) == f"{tenant}\x1f{subject}"
    if name in ("sessions", "messages", "summaries", "message_index"):
        return doc.get("tenant") == f"{tenant}\x1f{subject}"
    if name == "session_revisions":
        return bool(doc["_id"] == f"{tenant}\x1f{subject}")
    if name in ("memories", "memory_versions"):
        return doc.get("tenant") == tenant and doc.get("owner") == subject
    if name == "audit_events":
        return doc.get("tenant") == tenant and doc.get("principal") == subject
    return False


def erase_cli(
    engine_uri: str, db_name: str, tmp: Path, *args: str, crash: str | None = None, skew_ms: int | None = None
) -> subprocess.CompletedProcess[str]:
    """`mongogate erase ARGS` in its own process (with test hooks: tests/fault_harness.py)."""
    env = os.environ | {
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_SERVER__DATA_DIR": str(tmp / "data"),
    }
    return subprocess.run(
        [*fault_harness.command(crash=crash, skew_ms=skew_ms), "erase", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
