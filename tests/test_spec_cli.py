"""`mongogate spec suggest` and the drift report of `mongogate check` (issue 20.1), on a real
collection of the shared engine, through the real command line and in-process."""

from __future__ import annotations

import contextlib
import io
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient
from pymongo.collection import Collection

from mongogate.cli import main
from mongogate.config import load_settings
from tests.conftest import Cli

SPEC = """
[[query_tools]]
name = "find_tickets"
description = "The caller's tickets"
collection = "tickets"
tenant_field = "org"
projection = ["title", "priority", "opened"]
fields = { title = "string", priority = "int", opened = "date" }
"""

EMBED = """
from mongogate.specs import QueryToolSpec
from mongogate.tools.registry import ToolRegistry


def registry(settings):
    r = ToolRegistry.from_settings(settings)
    r.add_query_tool(
        QueryToolSpec(
            name="ticket_titles",
            description="Titles only",
            collection="tickets",
            tenant_field="org",
            projection=["title"],
            fields={"title": "string", "opened": "string"},
        )
    )
    return r
"""


@pytest.fixture
def config(tmp_path: Path, engine_uri: str, db_name: str) -> Path:
    docs: list[dict[str, Any]] = [
        {
            "org": "acme" if i % 2 else "globex",
            "title": f"ticket {i}",
            "priority": i % 5,
            "opened": datetime(2026, 1, 1 + i, tzinfo=UTC),
            "tags": ["a", "b"],
            "owner": ObjectId(),
            "address": {"city": "Oslo", "zip": "0150"},
            "password_hash": "x" * 20,
            "reporterEmail": f"r{i}@example.com",
        }
        for i in range(19)
    ]
    opened = datetime(2026, 2, 1, tzinfo=UTC)
    docs.append({"org": "acme", "title": "drifted", "priority": "high", "opened": opened})
    client: MongoClient[dict[str, Any]]
    with MongoClient(engine_uri) as client:
        tickets: Collection[dict[str, Any]] = client.get_database(db_name)["tickets"]
        tickets.insert_many(docs)
    path = tmp_path / "mongogate.toml"
    database = f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n'
    path.write_text(database + '[auth]\ntenant = "acme"\n[server]\ndata_dir = "d"\n')
    return path


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}


def test_spec_suggest_prints_a_block_that_validates_as_config(config: Path, cli: Cli) -> None:
    """Old code: there was no way to start a spec from an existing collection."""
    r = cli(
        ["spec", "suggest", "--config", str(config), "--collection", "tickets", "--tenant-field=org"], _env()
    )
    assert r.returncode == 0, r.stderr
    block = r.stdout
    comments = [line for line in block.splitlines() if line.startswith("#")]
    # sensitive-looking names are left out, listed for the operator with their types
    assert any("password_hash" in c for c in comments) and any("reporterEmail" in c for c in comments)
    # the drifting field is named, with how many documents hold which type
    assert any("priority: int in 19 of 20, string in 1" in c for c in comments), comments
    config.write_text(config.read_text() + "\n" + block)
    spec = load_settings(config).query_tools[0]  # the block pastes as it is
    assert spec.tenant_field == "org" and "org" not in spec.fields
    assert spec.fields == {
        "title": "string",
        "priority": "int",
        "opened": "date",
        "tags": "string",
        "owner": "objectId",
    }
    assert any("address.city" in c for c in comments)  # personal data: left for the operator
    assert "password_hash" not in spec.projection and "reporterEmail" not in spec.projection
    assert spec.index == [("org", 1), ("opened", -1)] and spec.sort == {"opened": -1}
    assert 'createIndex({"org": 1, "opened": -1})' in block


def test_spec_suggest_check_reports_drift_with_exit_status_1(config: Path) -> None:
    config.write_text(config.read_text() + SPEC)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["spec", "suggest", "--check", "--config", str(config), "--collection", "tickets"])
    assert status == 1
    text = out.getvalue()
    expected = "type drift: priority declared int, found string in 1 of 20 sampled documents"
    assert f"query tool find_tickets: {expected}" in text


def test_check_samples_config_and_embedded_tools_for_drift(config: Path, tmp_path: Path) -> None:
    """Old code: `check` counted documents only, and knew nothing of tools registered in code."""
    config.write_text(config.read_text() + SPEC)
    app = tmp_path / "app.py"
    app.write_text(EMBED)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["check", "--config", str(config), "--embed", f"{app}:registry", "--sample", "50"])
    text = out.getvalue()
    assert status == 0, text  # drift is a warning: queries null those values and say so
    assert "config: ok (2 query tool(s), 1 from --embed" in text
    drift = "type drift: priority declared int, found string in 1 of 20"
    assert f"WARNING query tool find_tickets: {drift}" in text
    # the embedded tool declares `opened` as a string: every sampled date drifts
    drift = "type drift: opened declared string, found date in 20 of 20"
    assert f"WARNING query tool ticket_titles: {drift}" in text
    assert "query tool ticket_titles: collection 'tickets' (20 documents)" in text


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("nocolon", "must look like 'package.module:attr'"),
        ("missing_file.py:x", "does not exist"),
        ("os:sep", "is a str: expected a ToolRegistry"),
        ("json:loads", "calling it failed: TypeError"),
        ("json:nope", "has no attribute 'nope'"),
    ],
)
def test_bad_embed_reference_is_one_clear_line(config: Path, ref: str, message: str) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["check", "--config", str(config), "--embed", ref])
    assert status == 2 and message in err.getvalue(), err.getvalue()


def test_suggest_without_the_tenant_field_says_what_it_saw(config: Path) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["spec", "suggest", f"--config={config}", "--collection=tickets", "--tenant-field=x"])
    assert status == 2
    assert "tenant field 'x' holds no string in any of the 20 sampled documents" in err.getvalue()
    assert "title" in err.getvalue()


def test_suggest_field_names_from_the_data_never_leave_their_comment_or_string() -> None:
    """Field names are data: one holding a newline, a carriage return or a terminal escape is shown
    escaped, so the block never holds a line the operator did not see as a comment, and pastes as
    the one tool. Old code: ``note\\n[server]...`` ended its comment and added TOML lines (and the
    block did not parse); ``\\x1b[2J`` cleared the operator's terminal."""
    import tomllib

    from mongogate.cli.spec import suggest

    injected = 'note\n[[query_tools]]\nname = "pwn"\n#'
    docs: list[dict[str, Any]] = [
        {
            "org": "acme",
            "title": f"t{i}",
            injected: "x",  # sensitive-looking: listed in a comment
            "z\x1b[2J": None,  # no single type: listed in a comment
            "mix\rhide": 1 if i else "s",  # drifting: listed in a comment, and a field
            "sm\U0001f600le": "x",  # outside the BMP: a TOML key as it is
            "del\x7f": "x",
        }
        for i in range(3)
    ]
    block, spec = suggest("c", "org", docs, 3)
    assert "\x1b" not in block and "\r" not in block and "\x7f" not in block
    header = block.splitlines().index("[[query_tools]]")
    assert all(line.startswith("#") for line in block.splitlines()[:header]), block
    parsed = tomllib.loads(block)
    assert [t["name"] for t in parsed["query_tools"]] == [spec.name]
    assert set(parsed["query_tools"][0]["fields"]) == set(spec.fields)
    assert "sm\U0001f600le" in spec.fields
    # a name holding a control character is left out (the spec loader refuses it), and said
    assert not {"mix\rhide", "del\x7f"} & set(spec.fields)
    [said] = [line for line in block.splitlines() if "control or bidirectional" in line]
    assert '"mix\\u000dhide"' in said and '"del\\u007f"' in said, said
