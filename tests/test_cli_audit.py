"""`mongogate audit` for an auditor (issue 20, section 4): a time window, a principal, a summary of
tenant x reason, table / JSON Lines / CSV, zero results that explain themselves; and development
tokens with a subject so that a demo trail tells principals apart."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import subprocess
from pathlib import Path
from typing import Any

import jwt
import pytest

from mongogate.audit.log import AuditLog
from mongogate.cli import main
from tests.conftest import DEV_SECRET, Cli
from tests.helpers import EXE, ROOT

EVENTS: list[tuple[str, str, str, str, str, str]] = [
    # ts, event, tenant, principal, reason, path
    ("2026-01-01T10:00:00.000Z", "filter_rejected", "acme", "alice", "operator_not_allowed", "filter.$where"),
    ("2026-01-02T10:00:00.000Z", "filter_rejected", "acme", "bob", "operator_not_allowed", "filter.$where"),
    ("2026-01-02T11:00:00.000Z", "filter_rejected", "acme", "alice", "operator_not_allowed", "filter.$expr"),
    ("2026-01-03T10:00:00.000Z", "filter_rejected", "globex", "carol", "field_not_allowed", "filter.secret"),
    ("2026-01-03T12:00:00.000Z", "storage_error", "acme", "alice", "storage_error", "arguments"),
    ("2026-01-04T10:00:00.000Z", "filter_rejected", "acme", '=HYPERLINK("x")', "too_deep", "filter\x1b[2J"),
]


@pytest.fixture
def trail(tmp_path: Path) -> Path:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, redact_values=False, max_value_chars=64, stream=None)
    for i, (ts, event, tenant, principal, reason, where) in enumerate(EVENTS):
        log.write(
            {
                "event": event,
                "ts": ts,
                "tool": "find_orders",
                "tenant": tenant,
                "principal": principal,
                "reason": reason,
                "path": where,
                "forbidden": [{"name": "$where", "path": where, "count": 1}] if "$where" in where else [],
                "request_id": f"r{i}",
            }
        )
    log.close()
    return path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    assert main(["audit", *args]) == 0
    out, err = capsys.readouterr()
    return out, err


def _jsonl(out: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    lines = [json.loads(line) for line in out.splitlines()]
    return lines[:-1], lines[-1]["summary"]


def test_until_and_principal_narrow_the_window(trail: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = _run(capsys, "--path", str(trail), "--since", "2026-01-02", "--until", "2026-01-03T11:00:00")
    events, summary = _jsonl(out)  # not a terminal: JSON Lines, the summary last
    assert [e["request_id"] for e in events] == ["r1", "r2", "r3"]
    out, _ = _run(capsys, "--path", str(trail), "--principal", "alice", "--format", "jsonl")
    events, summary = _jsonl(out)
    assert [e["request_id"] for e in events] == ["r0", "r2", "r4"]
    assert (summary["rejected"], summary["storage_errors"]) == (2, 1)


def test_summary_is_tenant_by_reason_with_first_last_and_paths(
    trail: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _ = _run(capsys, "--path", str(trail), "--summary", "--format", "jsonl")
    rows, summary = _jsonl(out)
    assert rows[0] == {
        "tenant": "acme",
        "event": "filter_rejected",
        "reason": "operator_not_allowed",
        "count": 3,
        "first": "2026-01-01T10:00:00.000Z",
        "last": "2026-01-02T11:00:00.000Z",
        "paths": [{"path": "filter.$where", "count": 2}, {"path": "filter.$expr", "count": 1}],
    }
    assert {(r["tenant"], r["reason"]): r["count"] for r in rows[1:]} == {
        ("acme", "storage_error"): 1,
        ("acme", "too_deep"): 1,
        ("globex", "field_not_allowed"): 1,
    }
    assert summary["rejected"] == 5 and summary["storage_errors"] == 1
    out, _ = _run(capsys, "--path", str(trail), "--summary", "--format", "table")
    header, first = out.splitlines()[:2]
    assert header.split() == ["tenant", "event", "reason", "count", "first", "last", "paths"]
    assert first.split()[:4] == ["acme", "filter_rejected", "operator_not_allowed", "3"]
    assert "filter.$where (2), filter.$expr (1)" in first
    assert "5 rejected filter(s), 1 storage error(s), 0 query event(s)" in out


def test_csv_is_safe_to_open_in_a_spreadsheet(trail: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = _run(capsys, "--path", str(trail), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == len(EVENTS) and rows[0]["forbidden"] == "$where"
    hostile = rows[-1]
    assert hostile["principal"] == '\'=HYPERLINK("x")'  # not a formula
    assert "\x1b" not in out and hostile["path"] == "filter\\u001b[2J"


def test_a_table_on_a_terminal_jsonl_elsewhere(trail: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real command line, on a pseudo-terminal: the default is the table; elsewhere JSON Lines."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    main_fd, child_fd = pty.openpty()
    try:
        r = subprocess.run(
            [*EXE, "audit", "--path", str(trail), "--tenant", "globex"],
            env=env,
            cwd=ROOT,
            stdout=child_fd,
            stderr=subprocess.PIPE,
            timeout=120,
        )
        os.close(child_fd)
        child_fd = -1
        out = b""
        while True:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # EIO: the child's side is closed and everything was read
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(main_fd)
        if child_fd != -1:
            os.close(child_fd)
    assert r.returncode == 0, r.stderr
    text = out.decode().replace("\r\n", "\n")
    assert text.splitlines()[0].split() == [
        "ts", "event", "tenant", "principal", "tool", "reason", "path", "forbidden", "request_id"
    ]  # fmt: skip
    assert "globex" in text.splitlines()[1] and "1 rejected filter(s)" in text
    piped, _ = _run(capsys, "--path", str(trail))  # stdout not a terminal
    assert json.loads(piped.splitlines()[-1])["summary"]["events"] == len(EVENTS)


def test_zero_results_name_the_filter_that_matched_nothing(
    trail: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, err = _run(capsys, "--path", str(trail), "--reason", "operator_not_alowed")
    assert _jsonl(out)[0] == []
    assert "no event has reason 'operator_not_alowed' here; 6 match without --reason" in err
    assert "operator_not_allowed (3)" in err
    _, err = _run(capsys, "--path", str(trail), "--since", "2027-01-01")
    assert "6 event(s) match outside --since/--until" in err
    _, err = _run(capsys, "--path", str(trail.parent / "nothing.jsonl"))
    assert "no audit file at" in err


def test_reading_the_collection_while_the_sink_is_the_file_says_so(
    trail: Path, tmp_path: Path, engine_uri: str, db_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n[audit]\npath = "{trail}"\n')
    out, err = _run(capsys, "--config", str(cfg), "--source", "mongodb")
    assert _jsonl(out)[0] == []
    assert "audit.sink is 'file', so servers write to" in err and str(trail) in err
    assert "drop --source mongodb" in err


def test_token_with_a_subject_through_the_command_line(tmp_path: Path, cli: Cli) -> None:
    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(
        f'[auth]\nmode = "jwt"\njwt_secret = "{DEV_SECRET}"\n'
        'issuer = "mongogate-dev"\naudience = "mongogate"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    r = cli(["token", "--tenant", "acme", "--sub", "alice", "--config", str(cfg)], env)
    assert r.returncode == 0, r.stderr
    claims = jwt.decode(r.stdout.strip(), DEV_SECRET, algorithms=["HS256"], audience="mongogate")
    assert claims["sub"] == "alice"
