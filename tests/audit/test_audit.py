"""The audit log: one event per call, to the file and stderr, never stdout; reading and following."""

from __future__ import annotations

import asyncio
import io
import json
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId

from mongogate.audit.log import AuditLog
from mongogate.audit.query import AuditQuery
from mongogate.audit.read import follow, read_events, summarize
from mongogate.errors import PolicyViolation
from mongogate.policy.filters import check_filter
from tests.policy.specs import LIMITS, ORDERS


def _reject(log: AuditLog, filter: Any, *, tool: str = "find_orders", tenant: str = "acme") -> dict[str, Any]:
    with pytest.raises(PolicyViolation) as info:
        check_filter(filter, ORDERS, LIMITS)
    return log.filter_rejected(
        tool=tool,
        tenant=tenant,
        principal="alice",
        reason=info.value.reason,
        path=info.value.path,
        filter=filter,
        request_id="r-1",
    )


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_event_per_rejection_to_file_and_stderr_never_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep" / "dir" / "audit.jsonl"
    log = AuditLog(path, redact_values=False, max_value_chars=64)
    event = _reject(log, {"$or": [{"status": "a"}, {"total": {"$where": "sleep(1000)"}}]})
    out, err = capsys.readouterr()
    assert out == ""
    assert [json.loads(x) for x in err.splitlines()] == [event]
    assert _lines(path) == [event]
    assert event["event"] == "filter_rejected"
    assert event["reason"] == "operator_not_allowed"
    assert event["path"] == "filter.$or[1].total.$where"
    assert event["filter"] == {"$or": [{"status": "a"}, {"total": {"$where": "sleep(1000)"}}]}
    assert {k: event[k] for k in ("tool", "tenant", "principal", "request_id")} == {
        "tool": "find_orders",
        "tenant": "acme",
        "principal": "alice",
        "request_id": "r-1",
    }
    ts = datetime.fromisoformat(event["ts"].replace("Z", "+00:00"))
    assert event["ts"].endswith("Z") and abs(datetime.now(UTC) - ts) < timedelta(minutes=1)
    _reject(log, {"userId": "other"})
    assert len(_lines(path)) == 2
    assert capsys.readouterr().out == ""


def test_values_are_truncated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = AuditLog(tmp_path / "a.jsonl", redact_values=False, max_value_chars=10, stream=None)
    event = _reject(log, {"status": "A" * 5000, "$where": "x"})
    assert event["filter"]["status"] == "AAAAAAAAAA…(+4990 chars)"
    assert _lines(tmp_path / "a.jsonl")[0]["filter"]["status"] == event["filter"]["status"]
    assert capsys.readouterr() == ("", "")  # stream=None: the file only


def test_redaction_replaces_every_scalar_with_its_type(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl", redact_values=True, max_value_chars=64, stream=None)
    filter = {"status": "secret", "total": {"$in": [1, 2.5, True, None]}, "$where": "x"}
    event = _reject(log, filter)
    assert event["filter"] == {
        "status": "<string>",
        "total": {"$in": ["<int>", "<number>", "<bool>", "<null>"]},
        "$where": "<string>",
    }
    assert "secret" not in (tmp_path / "a.jsonl").read_text()


def test_non_json_values_are_rendered_safely(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl", redact_values=False, max_value_chars=64, stream=None)
    oid = ObjectId("65f1a2b3c4d5e6f708192a3b")
    filter = {"x": oid, "d": datetime(2024, 5, 1, tzinfo=UTC), "b": b"\x00", "n": float("nan"), "s": "\ud800"}
    event = log.filter_rejected(
        tool="t", tenant="a", principal=None, reason="r", path="filter.x", filter=filter, request_id=None
    )
    assert event["filter"]["x"] == str(oid)
    assert event["filter"]["d"] == "2024-05-01T00:00:00Z"
    assert event["filter"]["n"] == "nan"
    line = (tmp_path / "a.jsonl").read_text()
    assert line.isascii() and json.loads(line)["filter"]["s"] == "\ud800"


def test_huge_filters_are_bounded(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl", redact_values=False, max_value_chars=16, stream=None)
    deep: Any = "x"
    for _ in range(100):
        deep = {"k": deep}
    filter = {"wide": list(range(10_000)), "deep": deep, **{f"f{i}": i for i in range(200)}}
    log.filter_rejected(
        tool="t", tenant="a", principal="p", reason="r", path="p" * 5000, filter=filter, request_id="1"
    )
    assert (tmp_path / "a.jsonl").stat().st_size < 5000


def test_query_event(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = AuditLog(tmp_path / "a.jsonl", redact_values=False, max_value_chars=64)
    event = log.query(
        tool="find_orders",
        tenant="acme",
        principal="alice",
        returned=3,
        truncated=True,
        ms=1.23456,
        request_id="9",
    )
    assert event["event"] == "query" and event["returned"] == 3 and event["truncated"] is True
    assert event["ms"] == 1.235
    assert capsys.readouterr().out == ""


def test_stdout_is_refused() -> None:
    with pytest.raises(ValueError, match="stdout"):
        AuditLog(Path("x"), redact_values=False, max_value_chars=64, stream=sys.stdout)


def test_unwritable_file_is_reported_not_raised(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    log = AuditLog(blocker / "audit.jsonl", redact_values=False, max_value_chars=64)
    _reject(log, {"$where": "1"})
    out, err = capsys.readouterr()
    assert out == "" and "cannot write audit log" in err and '"filter_rejected"' in err


def test_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl", redact_values=False, max_value_chars=64, stream=None)

    def work(n: int) -> None:
        for i in range(50):
            log.filter_rejected(
                tool=f"t{n}",
                tenant="a",
                principal="p",
                reason="r",
                path="p",
                filter={"s": "x" * 60},
                request_id=str(i),
            )

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(_lines(tmp_path / "a.jsonl")) == 400


def test_read_filter_and_summarize(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    log = AuditLog(path, redact_values=False, max_value_chars=64, stream=None)
    _reject(log, {"$where": "1"})
    _reject(log, {"userId": "x"}, tenant="beta")
    _reject(log, {"$expr": {}}, tool="find_invoices")
    log.query(
        tool="find_orders", tenant="acme", principal="p", returned=1, truncated=False, ms=1, request_id="q"
    )
    with path.open("a") as f:
        f.write('not json\n[1, 2]\n\n{"event": "filter_rejected", "ts": "garbage"}\n')
    events = list(read_events(path))
    assert len(events) == 5
    assert [e["tenant"] for e in read_events(path, AuditQuery(tenant="beta"))] == ["beta"]
    assert len(list(read_events(path, AuditQuery(tool="find_invoices")))) == 1
    assert len(list(read_events(path, AuditQuery(reason="operator_not_allowed")))) == 2
    assert len(list(read_events(path, AuditQuery(since=datetime.now(UTC) - timedelta(minutes=5))))) == 4
    assert list(read_events(path, AuditQuery(since=datetime.now(UTC) + timedelta(minutes=5)))) == []
    assert list(read_events(tmp_path / "missing.jsonl")) == []
    summary = summarize(read_events(path))
    assert summary == {
        "events": 5,
        "rejected": 4,
        "storage_errors": 0,
        "queries": 1,
        "by_reason": {"operator_not_allowed": 2, "tenant_field_forbidden": 1, "None": 1},
        "by_tool": {"find_orders": 2, "find_invoices": 1, "None": 1},
        "by_tenant": {"acme": 2, "beta": 1, "None": 1},
    }


def test_follow_sees_new_events_and_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    log = AuditLog(path, redact_values=False, max_value_chars=64, stream=None)
    _reject(log, {"$where": "1"})
    seen: list[dict[str, Any]] = []
    done = threading.Event()

    def consume() -> None:
        for event in follow(path, AuditQuery(tool="find_orders"), poll_s=0.01, stop=done.is_set):
            seen.append(event)
            if len(seen) == 3:
                done.set()

    t = threading.Thread(target=consume)
    t.start()
    with path.open("a") as f:  # a line written in two pieces is read once, whole
        f.write('{"event": "filter_rejected", "tool": "find_')
        f.flush()
        threading.Event().wait(0.05)
        f.write('orders", "reason": "x"}\n')
    _reject(log, {"$expr": {}}, tool="other")  # filtered out
    _reject(log, {"$regex": "a"})
    t.join(timeout=10)
    done.set()
    assert not t.is_alive()
    assert [e.get("reason") for e in seen] == ["operator_not_allowed", "x", "operator_not_allowed"]


def test_follow_from_end_and_truncation(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"event": "old"}\n' * 3)
    polls = iter(range(1000))
    gen = follow(path, from_start=False, poll_s=0.001, stop=lambda: next(polls) > 900)
    path.write_text('{"event": "new"}\n')  # truncated and rewritten: read from the start again
    assert next(gen) == {"event": "new"}


class _Recorder(io.StringIO):
    """A stream that notes which thread wrote to it, and can hold the writer at a gate."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        super().__init__()
        self.threads: set[int] = set()
        self.gate = gate
        self.entered = threading.Event()
        self.owner = threading.get_ident()

    def write(self, s: str) -> int:
        self.threads.add(threading.get_ident())
        self.entered.set()
        if self.gate is not None and threading.get_ident() != self.owner:  # never hold the test itself
            self.gate.wait()
        return super().write(s)


def test_a_write_from_the_event_loop_never_touches_disk_or_stream_on_the_loop(tmp_path: Path) -> None:
    stream = _Recorder()
    log = AuditLog(tmp_path / "a.jsonl", redact_values=False, max_value_chars=64, stream=stream)

    async def call() -> int:
        log.query(tool="t", tenant="a", principal="p", returned=1, truncated=False, ms=1, request_id="1")
        await log.synced()  # waits for the writer thread without blocking this loop
        return threading.get_ident()

    loop_thread = asyncio.run(call())
    assert stream.threads and loop_thread not in stream.threads
    assert [e["event"] for e in _lines(tmp_path / "a.jsonl")] == ["query"]
    log.close()


def test_the_file_is_opened_once_not_per_event(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "a.jsonl", redact_values=False, max_value_chars=64, stream=None)
    for _ in range(5):
        _reject(log, {"$where": "1"})
    assert len(_lines(tmp_path / "a.jsonl")) == 5
    assert log._writer.opened == 1
    log.close()
    _reject(log, {"$where": "1"})  # after close, the next event reopens the file
    assert len(_lines(tmp_path / "a.jsonl")) == 6 and log._writer.opened == 2
    log.close()


def test_close_writes_an_event_queued_just_before_shutdown(tmp_path: Path) -> None:
    gate = threading.Event()
    stream = _Recorder(gate)
    log = AuditLog(tmp_path / "a.jsonl", redact_values=False, max_value_chars=64, stream=stream)

    async def serve() -> None:
        log.query(tool="t", tenant="a", principal="p", returned=1, truncated=False, ms=1, request_id="1")
        await asyncio.to_thread(stream.entered.wait)  # the writer thread is now held at the gate
        log.query(tool="t", tenant="a", principal="p", returned=2, truncated=False, ms=1, request_id="2")

    asyncio.run(serve())  # the second event is only queued when the "server" stops
    gate.set()
    log.close()  # shutdown
    assert [e["request_id"] for e in _lines(tmp_path / "a.jsonl")] == ["1", "2"]
    assert stream.owner not in stream.threads
