"""`mongogate memory import|export` against what a deployment reads and who can read the file
(issue 36): the scope asked for must be the configured one, and an export is a new file of its
owner's, renamed into place, never an existing file written over. Real engine, real model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pymongo import MongoClient

from tests.conftest import Cli

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a file of another user")
FACTS = [
    {"text": "The office wifi password is korMoran-77.", "key": "wifi"},
    {"text": "Dana prefers tea, never coffee.", "key": "drink"},
]


def _env(engine_uri: str, db_name: str, tmp: Path, scope: str = "tenant") -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
        "MONGOGATE_SERVER__DATA_DIR": str(tmp),
        "MONGOGATE_MEMORY__LONG_TERM__SCOPE": scope,
    }


def _facts(tmp: Path) -> Path:
    src = tmp / "in.jsonl"
    src.write_text("".join(json.dumps(f) + "\n" for f in FACTS), encoding="utf-8")
    return src


def _memories(engine_uri: str, db_name: str) -> list[dict[str, object]]:
    with MongoClient[dict[str, object]](engine_uri) as c:
        return list(c[db_name]["memories"].find({}, {"tenant": 1, "owner": 1}))


@pytest.mark.parametrize(
    ("scope", "subject", "why"),
    [
        ("subject", None, "memory.long_term.scope is 'subject'"),
        ("tenant", "dana", "memory.long_term.scope is 'tenant'"),
    ],
)
def test_import_and_export_refuse_a_scope_no_caller_reads(
    cli: Cli, engine_uri: str, db_name: str, tmp_path: Path, scope: str, subject: str | None, why: str
) -> None:
    """Before: a subject-scope deployment imported without --subject ("created 2") into the
    tenant-wide scope no caller reads, and its export wrote 0 of the subjects' memories."""
    env = _env(engine_uri, db_name, tmp_path, scope)
    who = ["--tenant", "acme"] + ([] if subject is None else ["--subject", subject])
    imported = cli(["memory", "import", str(_facts(tmp_path)), *who], env)
    assert imported.returncode == 2 and why in imported.stderr, imported
    assert "--subject" in imported.stderr and imported.stdout == ""
    assert _memories(engine_uri, db_name) == []  # nothing stored
    out = tmp_path / "out.jsonl"
    exported = cli(["memory", "export", str(out), *who], env)
    assert exported.returncode == 2 and why in exported.stderr, exported
    assert not out.exists()


def test_import_and_export_in_the_configured_subject_scope(
    cli: Cli, engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    env = _env(engine_uri, db_name, tmp_path, "subject")
    who = ["--tenant", "acme", "--subject", "dana"]
    assert cli(["memory", "import", str(_facts(tmp_path)), *who], env).returncode == 0
    assert {str(m["owner"]) for m in _memories(engine_uri, db_name)} == {"dana"}
    out = tmp_path / "out.jsonl"
    done = cli(["memory", "export", str(out), *who, "--json"], env)
    assert done.returncode == 0 and json.loads(done.stdout) == {"exported": 2}


def test_an_export_is_a_new_file_a_reader_of_the_old_one_never_sees(
    cli: Cli, engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Someone holding the old file open (or who made it beforehand, 0644) keeps reading the old
    contents: the export is a new 0600 file renamed over the path. Before, the same file was
    truncated and written, so every descriptor on it read the memories."""
    env = _env(engine_uri, db_name, tmp_path)
    assert cli(["memory", "import", str(_facts(tmp_path)), "--tenant", "acme"], env).returncode == 0
    out = tmp_path / "out.jsonl"
    out.write_text("old\n", encoding="utf-8")
    out.chmod(0o644)
    before = out.stat().st_ino
    with out.open(encoding="utf-8") as spy:
        done = cli(["memory", "export", str(out), "--tenant", "acme"], env)
        assert done.returncode == 0 and done.stdout.strip() == "exported 2 memories", done
        assert spy.read() == "old\n"  # the old file, untouched
    assert out.stat().st_ino != before and out.stat().st_mode & 0o777 == 0o600
    assert "korMoran-77" in out.read_text(encoding="utf-8")
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


@as_root
def test_an_export_to_a_path_of_another_user_is_refused(
    cli: Cli, engine_uri: str, db_name: str, tmp_path: Path, shared: Path
) -> None:
    """Another local user made the file first, in a shared directory, to read what lands there:
    refused, nothing exported, their file as it was. Before, it was opened, truncated, chmodded
    and written (as root, whoever owned it)."""
    env = _env(engine_uri, db_name, tmp_path)
    assert cli(["memory", "import", str(_facts(tmp_path)), "--tenant", "acme"], env).returncode == 0
    planted = shared / "export.jsonl"
    planted.write_text("", encoding="utf-8")
    os.chown(planted, NOBODY, NOBODY)
    planted.chmod(0o666)
    done = cli(["memory", "export", str(planted), "--tenant", "acme"], env)
    assert done.returncode == 2 and "belongs to another user (uid 65534)" in done.stderr, done
    assert planted.read_text(encoding="utf-8") == "" and planted.stat().st_uid == NOBODY
    assert [p.name for p in shared.iterdir()] == ["export.jsonl"]
    fresh = shared / "mine.jsonl"  # a new name in the same shared directory is fine
    assert cli(["memory", "export", str(fresh), "--tenant", "acme"], env).returncode == 0
    assert fresh.stat().st_mode & 0o777 == 0o600 and "korMoran-77" in fresh.read_text(encoding="utf-8")
