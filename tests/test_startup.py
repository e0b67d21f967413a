"""Start-up (issue 20.6): a stdio server answers `initialize` without waiting for the database,
and still reports a database it cannot use; every command says which data directory it uses,
and `server.data_dir` follows the config file."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import EXE, INITIALIZE, free_port, send, stdio_serve


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
