"""Start-up (issue 20.6): a stdio server answers `initialize` without waiting for the database,
and still reports a database it cannot use; every command says which data directory it uses,
and `server.data_dir` follows the config file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from tests.helpers import EXE, INITIALIZE, free_port, http_serve, send, served_env, stdio_serve


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    e["MONGOGATE_SERVER__DATA_DIR"] = str(tmp_path / "data")
    return e


def test_stdio_initialize_does_not_wait_for_the_database(env: dict[str, str]) -> None:
    """Old code: the database was opened (and pinged) before the server read its first line, so a
    slow or unreachable database held `initialize` for the whole server selection timeout (here
    the process exited with status 3 and never answered)."""
    uri = f"mongodb://127.0.0.1:{free_port()}/?serverSelectionTimeoutMS=5000"
    proc = stdio_serve(env | {"MONGOGATE_DATABASE__URI": uri, "MONGOGATE_AUTH__TENANT": "acme"})
    assert proc.stdout is not None and proc.stderr is not None
    try:
        send(proc, INITIALIZE[0])
        first = proc.stdout.readline()
        assert first, f"no answer to initialize: {proc.stderr.read()}"
        assert json.loads(first)["result"]["serverInfo"]["name"] == "mongogate"
        send(proc, INITIALIZE[1])
        send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
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


@pytest.mark.embedded_engine
def test_engine_stop_from_elsewhere_finds_the_engine_of_the_config_file(tmp_path: Path) -> None:
    """Old code: the default data directory followed the working directory, so `engine stop
    --config <path>` run from another directory said "was not running" while it ran."""
    from mongogate.engine import client as engine_client

    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    conf_dir, here, there = tmp_path / "conf", tmp_path / "here", tmp_path / "there"
    for d in (conf_dir, here, there):
        d.mkdir()
    config = conf_dir / "mongogate.toml"
    config.write_text('[auth]\ntenant = "acme"\n')  # no server.data_dir: the default

    def engine(verb: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*EXE, "engine", verb, "--config", str(config)], env=env, cwd=cwd, capture_output=True, text=True
        )

    try:
        start = engine("start", here)
        assert start.returncode == 0, start.stderr
        stop = engine("stop", there)
        assert stop.returncode == 0, stop.stderr
        assert "engine: stopped (pid" in stop.stdout, stop.stdout
        for out in (start.stdout, stop.stdout):  # each says which directory, absolute
            assert f"data directory: {conf_dir / '.mongogate'}" in out
        assert not (here / ".mongogate").exists() and not (there / ".mongogate").exists()
    finally:
        for d in (conf_dir / ".mongogate", here / ".mongogate"):
            if d.exists():
                engine_client.stop(d)


def test_every_command_names_its_data_directory(tmp_path: Path) -> None:
    """`check`, `engine status` and `serve --http`'s banner say which directory they use."""
    import contextlib
    import io

    from mongogate.cli import main
    from mongogate.cli.serve import _banner
    from mongogate.config import load_settings

    config = tmp_path / "m.toml"
    uri = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100"
    config.write_text(f'[server]\ndata_dir = "d"\n[database]\nuri = "{uri}"\n')
    settings = load_settings(config)
    line = f"data directory: {tmp_path / 'd'} (relative paths follow the config file)"

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(Exception):
        main(["check", "--config", str(config)])
    assert line in out.getvalue().splitlines()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        _banner(settings, "http://127.0.0.1:8000/mcp", demo=False)
    assert line in err.getvalue().splitlines()


@pytest.mark.anyio
@pytest.mark.timeout(60)
async def test_calls_waiting_for_a_database_that_failed_to_open_are_refused(tmp_path: Path) -> None:
    """A server built with ``on_open_failure`` answers at once and opens its database afterwards;
    when the open fails and the callback returns (an embedder's, not `serve`'s, which exits), the
    calls waiting for it end with one non-retryable error. Old code: they waited forever
    (pytest-timeout ends this test on it)."""
    from mcp import Client

    from mongogate.demo import FIND_ORDERS
    from mongogate.server.app import build_server
    from mongogate.tools.registry import ToolRegistry
    from tests.conftest import make_settings

    settings = make_settings("mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200", "t_never", tmp_path)
    failed: list[BaseException] = []
    server = build_server(settings, ToolRegistry([FIND_ORDERS]), on_open_failure=failed.append)
    async with Client(server) as c:
        first = await c.call_tool("find_orders", {"filter": {}})
        again = await c.call_tool("find_orders", {"filter": {}})
    for r in (first, again):
        text = r.content[0].text  # type: ignore[union-attr]
        assert r.is_error and text.startswith("[storage_error] the server could not open its database"), text
        assert "127.0.0.1:1" not in text  # the cause is the operator's (in `failed`, and the log)
    assert len(failed) == 1


#: what a server's first answers never need (issue 38.6): the embedding model, PyJWT and
#: cryptography without JWT auth, prometheus_client without metrics, the stemmer of text search
LAZY = ("wordllama", "tokenizers", "jwt", "cryptography.x509", "prometheus_client", "snowballstemmer")

_FIRST_CALLS = """
import json, sys, anyio
from mcp import Client
from mongogate.config import load_settings
from mongogate.server.app import build_server

LAZY = %r
settings = load_settings(None, database={"uri": sys.argv[1], "name": sys.argv[2]},
                         server={"data_dir": sys.argv[3]}, auth={"mode": "none", "tenant": "acme"})

async def main():
    out = {}
    async with Client(build_server(settings, transport="stdio")) as c:
        out["tools"] = len((await c.list_tools()).tools)
        out["loaded_at_list"] = [m for m in LAZY if m in sys.modules]
        fact = {"text": "The staging database is called orion-7.", "key": "staging"}
        r = await c.call_tool("remember", fact)
        assert not r.is_error, r.content
        r = await c.call_tool("recall", {"query": "what is the staging database called?"})
        assert not r.is_error, r.content
        out["recalled"] = [m["text"] for m in r.structured_content["memories"]]
        out["loaded_after_recall"] = [m for m in LAZY if m in sys.modules]
    print(json.dumps(out))

anyio.run(main)
"""


def test_tools_list_before_the_embedder_loads_and_recall_right_after(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Issue 38.6: a fresh server lists its tools without loading the embedding model, PyJWT
    (no JWT auth here), prometheus_client or the stemmer; a `remember` and a `recall` right after
    start load the model then and answer. Old code imported PyJWT, prometheus_client (with the
    HTTP module) and the stemmer on every start."""
    code = _FIRST_CALLS % (LAZY,)
    run = subprocess.run(
        [sys.executable, "-c", code, engine_uri, db_name, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["tools"] > 10
    assert out["loaded_at_list"] == []
    assert out["recalled"] == ["The staging database is called orion-7."]
    assert "wordllama" in out["loaded_after_recall"]  # loaded by the first remember, on demand


@pytest.mark.anyio
async def test_readyz_says_ready_only_when_a_call_can_be_answered(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Issue 38.6: `serve --http` opens its database once (in the lifespan, which runs the start-up
    checks), and the first `200` of `/readyz` means a call is answered at once, not refused."""
    import urllib.error
    import urllib.request

    from mcp import Client

    port = free_port()
    proc = http_serve(served_env(tmp_path / "data", engine_uri, db_name), port)
    try:
        while True:  # readiness polled, not waited for: each refused connection is retried
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=120) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                await anyio.sleep(0.01)
        async with Client(f"http://127.0.0.1:{port}/mcp") as c:
            first = await c.call_tool("remember", {"text": "Deploys freeze on Fridays.", "key": "freeze"})
            assert not first.is_error, first.content
            found = await c.call_tool("recall", {"query": "when do deploys freeze?"})
            assert not found.is_error and found.structured_content is not None, found.content
            assert [m["key"] for m in found.structured_content["memories"]] == ["freeze"]
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()
