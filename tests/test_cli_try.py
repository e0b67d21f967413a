"""`mongogate try` (issue 20, section 3): a query tool's policy on given arguments without MCP, the
exact command or the refusal exactly as the model reads it, and the audit event it would write;
nothing written unless asked. Checked against what the real server says for the same call."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mongogate.audit.read import read_events
from mongogate.cli import main
from tests.conftest import Cli
from tests.policy.test_aggregate_mcp import server_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def cfg(tmp_path: Path, engine_uri: str, db_name: str) -> Path:
    path = tmp_path / "mongogate.toml"
    path.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n'
        f'[server]\ndata_dir = "{tmp_path / "data"}"\n[audit]\npath = "{tmp_path / "audit.jsonl"}"\n'
    )
    return path


async def _try(capsys: pytest.CaptureFixture[str], cfg: Path, tool: str, args: object, *flags: str) -> Any:
    """`mongogate try ... --json` in-process (on a thread: the command runs its own event loop)."""
    argv = ["try", tool, "--demo", "--tenant", "acme", "--args", json.dumps(args), "--config", str(cfg)]
    code = await anyio.to_thread.run_sync(main, [*argv, "--json", *flags])
    report = json.loads(capsys.readouterr().out)
    assert code == (0 if report["allowed"] else 1)
    return report


HOSTILE: list[tuple[str, Any]] = [
    ("find_orders", {"filter": {"nosuch": 1, "$where": "sleep(9000)"}}),
    ("find_orders", {"filter": {"status": {"$regex": "."}}, "sort": {"userId": 1}}),
    ("find_orders", {"filter": {}, "sort": {f"k{i}": 1 for i in range(1000)}}),  # the bounds, first
    ("order_stats", {"pipeline": [{"$match": {}}, {"$lookup": {"from": "users", "as": "u"}}]}),
]


@pytest.mark.parametrize(("tool", "args"), HOSTILE)
async def test_the_refusal_is_what_the_model_reads_and_the_event_what_the_server_writes(
    tool: str, args: Any, cfg: Path, tmp_path: Path, engine_uri: str, db_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    report = await _try(capsys, cfg, tool, args)
    assert not (tmp_path / "audit.jsonl").exists()  # a dry run writes nothing
    settings, server = server_for(engine_uri, db_name, tmp_path / "srv")
    async with Client(server) as c:
        r = await c.call_tool(tool, args)
    said = r.content[0].text  # type: ignore[union-attr]
    [written] = list(read_events(settings.audit_path))

    def same(text: str) -> str:  # request ids differ per call
        return text.split(" (request ")[0]

    assert same(report["refusal"]) == same(said)
    shown = report["audit_event"]
    for key in ("event", "tool", "tenant", "reason", "path", "offending", "forbidden", "filter", "trimmed"):
        assert shown.get(key) == written.get(key), key


async def test_an_allowed_call_shows_the_exact_command_and_runs_it_with_execute(
    cfg: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = {"filter": {"status": "paid", "createdAt": {"$gte": "2026-01-01"}}, "sort": {"createdAt": -1}}
    report = await _try(capsys, cfg, "find_orders", args | {"limit": 3})
    assert report["command"] == {
        "find": "orders",
        "filter": {
            "$and": [
                {"status": "paid", "createdAt": {"$gte": {"$date": "2026-01-01T00:00:00Z"}}},
                {"userId": "acme"},
            ]
        },
        "projection": {"number": 1, "status": 1, "total": 1, "createdAt": 1, "_id": 0},
        "sort": {"createdAt": -1},
        "limit": 4,
        "maxTimeMS": 2000,
        "hint": {"userId": 1, "createdAt": -1},
    }
    assert report["audit_event"] is None and "result" not in report
    report = await _try(capsys, cfg, "find_orders", args | {"limit": 3}, "--execute")
    docs = report["result"]["documents"]
    assert len(docs) == 3 and {d["status"] for d in docs} == {"paid"}
    assert not (tmp_path / "audit.jsonl").exists()


async def test_audit_writes_the_event_only_when_asked(
    cfg: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = await _try(
        capsys, cfg, "find_orders", {"filter": {"$where": "1"}}, "--audit", "--sub", "auditor"
    )
    [written] = list(read_events(tmp_path / "audit.jsonl"))
    assert report["audit_written"] is True and written["principal"] == "auditor"
    assert written["request_id"] == report["audit_event"]["request_id"]


def test_try_through_the_command_line(cfg: Path, tmp_path: Path, cli: Cli) -> None:
    """The text a user reads (not --json), and the exit statuses."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    base = ["try", "--demo", "--config", str(cfg), "--tenant", "acme"]
    r = cli([*base[:1], "order_stats", *base[1:], "--args", '{"pipeline": [{"$out": "stolen"}]}'], env)
    assert r.returncode == 1, r.stderr
    assert "refused; the model reads:\n  [stage_forbidden] pipeline[0].$out: " in r.stdout
    assert '"forbidden": [' in r.stdout and "not written; --audit writes it" in r.stdout
    r = cli([*base[:1], "nosuch", *base[1:], "--args", "{}"], env)
    assert r.returncode == 2 and "no tool named 'nosuch'; tools: " in r.stderr and "find_orders" in r.stderr
    assert not (tmp_path / "audit.jsonl").exists()
