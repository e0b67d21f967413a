"""Start-up (issue 20.6): a stdio server answers `initialize` without waiting for the database,
and still reports a database it cannot use; every command says which data directory it uses,
and `server.data_dir` follows the config file."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import EXE, INITIALIZE, ROOT, free_port


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    e["MONGOGATE_SERVER__DATA_DIR"] = str(tmp_path / "data")
    return e


def _send(proc: subprocess.Popen[str], msg: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(msg) + "\n")
    proc.stdin.flush()


def test_stdio_initialize_does_not_wait_for_the_database(env: dict[str, str]) -> None:
    """Old code: the database was opened (and pinged) before the server read its first line, so a
    slow or unreachable database held `initialize` for the whole server selection timeout (here
    the process exited with status 3 and never answered)."""
    uri = f"mongodb://127.0.0.1:{free_port()}/?serverSelectionTimeoutMS=5000"
    proc = subprocess.Popen(
        [*EXE, "serve"],
        env=env | {"MONGOGATE_DATABASE__URI": uri, "MONGOGATE_AUTH__TENANT": "acme"},
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        _send(proc, INITIALIZE[0])
        first = proc.stdout.readline()
        assert first, f"no answer to initialize: {proc.stderr.read()}"
        assert json.loads(first)["result"]["serverInfo"]["name"] == "mongogate"
        _send(proc, INITIALIZE[1])
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        names = {t["name"] for t in json.loads(proc.stdout.readline())["result"]["tools"]}
        assert {"begin_turn", "load_context"} <= names
    finally:
        assert proc.stdin is not None
        proc.stdin.close()  # the client leaves while the database is still being opened
        status = proc.wait(timeout=60)
        err = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
    # the database that cannot be used is still reported, in one line, with its status
    assert status == 3, err
    lines = [line for line in err.splitlines() if line.startswith("mongogate:")]
    assert len(lines) == 1 and "cannot reach MongoDB" in lines[0] and "Traceback" not in err
