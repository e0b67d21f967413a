"""`mongogate check` says which vector path runs, prints the exact search index definition, and
whether it exists (the embedded engine has no search indexes: the exact scan runs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mongogate.config import LongTermSettings
from mongogate.db import EmbeddedEngine
from mongogate.recall.embedding import LOCAL_DIMENSIONS
from mongogate.recall.searchindex.vectors import vector_index_definition
from tests.conftest import Cli
from tests.helpers import served_env


@pytest.fixture
def env(tmp_path: Path, engine_uri: str, db_name: str) -> dict[str, str]:
    return served_env(tmp_path / "data", engine_uri, db_name)


@pytest.mark.parametrize("mode", ["auto", "scan"])
def test_check_reports_the_vector_path_and_index(env: dict[str, str], mode: str, cli: Cli) -> None:
    env = env | {"MONGOGATE_MEMORY__LONG_TERM__VECTOR_SEARCH": mode}
    r = cli(["check"], env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(
        ln.startswith("long-term memory indexes: ok") and "memory_text" in ln and "expires_at_ttl" in ln
        for ln in lines
    )
    assert f"long-term memory vector path: index (memory.long_term.vector_search = {mode})" in r.stdout
    assert "long-term memory writes: flat (each memory by its derived _id" in r.stdout
    assert "long-term memory recall: the engine's write signal (" in r.stdout  # a Unix socket
    i = next(i for i, ln in enumerate(lines) if ln.startswith("long-term memory vector index"))
    assert "'mongogate_memory_vectors': missing" in lines[i]
    printed = json.loads(lines[i + 1])
    assert printed == vector_index_definition(LongTermSettings(), LOCAL_DIMENSIONS)
    fields = {f["path"]: f["type"] for f in printed["definition"]["fields"]}
    assert fields["embedding"] == "vector" and {"tenant", "owner", "embedding_model"} <= set(fields)


def test_check_fails_when_atlas_is_forced_and_the_index_is_missing(env: dict[str, str], cli: Cli) -> None:
    env = env | {"MONGOGATE_MEMORY__LONG_TERM__VECTOR_SEARCH": "atlas"}
    r = cli(["check"], env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "long-term memory vector path: vectorSearch (memory.long_term.vector_search = atlas)" in r.stdout
    assert (
        "PROBLEM vector_search = 'atlas' but the search index 'mongogate_memory_vectors' is missing"
        in r.stdout
    )


def test_check_says_every_recall_reads_its_revision_without_a_write_signal(
    env: dict[str, str], cli: Cli, tmp_path: Path
) -> None:
    """An engine on a TCP port (or any MongoDB) has no write signal every writer shares."""
    engine = EmbeddedEngine(tmp_path / "tcp")
    uri = engine.start()
    try:
        r = cli(["check"], env | {"MONGOGATE_DATABASE__URI": uri})
    finally:
        engine.stop()
    assert r.returncode == 0, r.stderr
    assert (
        "long-term memory recall: one revision read (by _id) per recall keeps the index coherent" in r.stdout
    )


def test_check_says_so_when_a_socket_has_no_write_signal(
    env: dict[str, str], cli: Cli, tmp_path: Path
) -> None:
    """A Unix socket without a signal beside it (a real mongod's, or the file removed): a revision
    read per recall, and the path it looked for."""
    where = tmp_path / "sock"
    engine = EmbeddedEngine(where, socket_path=where / "engine.sock")
    uri = engine.start()
    (where / "recall.seq").unlink()
    try:
        r = cli(["check"], env | {"MONGOGATE_DATABASE__URI": uri})
    finally:
        engine.stop()
    assert r.returncode == 0, r.stderr
    assert "one revision read (by _id) per recall" in r.stdout
    assert f"no write signal of this user's at {where / 'recall.seq'}" in r.stdout
