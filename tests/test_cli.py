"""The command line as a user runs it: arguments, settings and their errors in-process
(`mongogate.cli.main`, the `cli` fixture); serving, the entry point and stdio in real
subprocesses, with real HTTP and the real MCP client over stdio."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.conftest import Cli
from tests.helpers import EXE, INITIALIZE, ROOT, free_port, send, stdio_serve


@pytest.fixture
def env(tmp_path: Path, engine_uri: str, db_name: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    e.update(
        MONGOGATE_SERVER__DATA_DIR=str(tmp_path / "data"),
        MONGOGATE_DATABASE__URI=engine_uri,
        MONGOGATE_DATABASE__NAME=db_name,
    )
    return e


def test_check_reports_and_exits_zero(cli: Cli, env: dict[str, str]) -> None:
    r = cli(["check", "--config", "examples/mongogate.toml"], env)
    assert r.returncode == 0, r.stderr
    assert "connection: ok" in r.stdout and "indexes: ok" in r.stdout


def test_check_fails_on_bad_config(cli: Cli, env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[memory]\nmax_context_limit = "lots"\n[query_tools]\n')
    r = cli(["check", "--config", str(bad)], env)
    assert r.returncode == 2
    assert str(bad) in r.stderr and "memory.max_context_limit" in r.stderr


def test_check_fails_when_database_unreachable(cli: Cli, env: dict[str, str]) -> None:
    env = env | {"MONGOGATE_DATABASE__URI": "mongodb://127.0.0.1:1/", "MONGOGATE_DATABASE__TIMEOUT_MS": "300"}
    r = cli(["check"], env)
    assert r.returncode == 3, r.stderr
    assert r.stderr.splitlines() == [
        "mongogate: cannot reach MongoDB at 127.0.0.1:1 (database.uri): no server answered within 300 ms "
        "(database.timeout_ms); check that it is running and reachable from this machine (host, port, "
        "firewall, TLS, replicaSet name), or raise the timeout"
    ]


@pytest.mark.parametrize("command", [["check"], ["serve"], ["serve", "--http", "--insecure-no-auth"]])
def test_unreachable_host_is_one_line_with_the_uri_timeout(
    cli: Cli, env: dict[str, str], command: list[str]
) -> None:
    """The URI's own serverSelectionTimeoutMS is used and named; `serve` does not blame privileges."""
    port = free_port()
    uri = f"mongodb://127.0.0.1:{port}/?serverSelectionTimeoutMS=200"
    r = cli(
        [*command, "--port", str(free_port())] if "--http" in command else command,
        env
        | {
            "MONGOGATE_DATABASE__URI": uri,
            "MONGOGATE_AUTH__TENANT": "acme",
        },
    )
    assert r.returncode == 3, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert f"127.0.0.1:{port} (database.uri)" in lines[0]
    assert "200 ms (serverSelectionTimeoutMS in the URI)" in lines[0]
    assert "privileges" not in r.stderr and "Topology" not in r.stderr


@pytest.mark.parametrize("command", [["check"], ["serve"]])
def test_non_mongodb_uri_is_a_config_error_naming_the_key(
    cli: Cli, env: dict[str, str], command: list[str]
) -> None:
    r = cli(command, env | {"MONGOGATE_DATABASE__URI": "postgres://x", "MONGOGATE_AUTH__TENANT": "acme"})
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "database.uri (from environment variable MONGOGATE_DATABASE__URI)" in r.stderr
    assert "mongodb:// or mongodb+srv://" in r.stderr


def test_taken_port_is_one_line_before_any_banner(cli: Cli, env: dict[str, str]) -> None:
    """A second `make run`: no banner, no token, no traceback; the port and --port; exit status 4."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = cli(
            ["serve", "--http", "--demo", "--config", "examples/mongogate.toml", "--port", str(port)], env
        )
    assert r.returncode == 4, r.stderr
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        f"mongogate: port {port} on 127.0.0.1 is already in use (another mongogate serve, or another "
        "program): stop it, or pick another port with --port N (or server.port)"
    ]


def test_start_up_failure_inside_the_app_is_raised_not_logged(capfd: pytest.CaptureFixture[str]) -> None:
    """A failure the pre-flight cannot see (in the app's lifespan) comes back as the error itself,
    for the CLI's one line, with no banner and no uvicorn traceback."""
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager

    import uvicorn
    from starlette.applications import Starlette

    from mongogate.errors import ConfigError
    from mongogate.server.startup import bind, run_bound

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        raise ConfigError("the demo data could not be seeded")
        yield

    ready: list[bool] = []
    sock = bind("127.0.0.1", 0)
    try:
        config = uvicorn.Config(Starlette(lifespan=lifespan), log_level="warning", lifespan="on")
        with pytest.raises(ConfigError, match="could not be seeded"):
            run_bound(config, sock, lambda: ready.append(True))
    finally:
        sock.close()
    assert ready == []
    assert "Traceback" not in capfd.readouterr().err


def test_version() -> None:
    r = subprocess.run([*EXE, "--version"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    from mongogate import __version__

    assert r.returncode == 0 and r.stdout.strip() == f"mongogate {__version__}"


def test_token_without_config_from_the_project_directory(cli: Cli, env: dict[str, str]) -> None:
    """The README's `mongogate token --tenant T`: the development server's config is found."""
    r = cli(["token", "--tenant", "globex"], env)
    assert r.returncode == 0, r.stderr
    from mongogate.config import load_settings
    from mongogate.server.auth.verify import build_token_verifier

    verifier = build_token_verifier(load_settings(ROOT / "examples" / "mongogate.toml").auth)
    assert verifier is not None
    import anyio

    token = anyio.run(verifier.verify_token, r.stdout.strip())
    assert token is not None and (token.claims or {}).get("tenant") == "globex"


def test_tools_lists_schemas(cli: Cli, env: dict[str, str]) -> None:
    r = cli(["tools", "--config", "examples/mongogate.toml"], env)
    assert r.returncode == 0, r.stderr
    assert "## find_orders  (read-only)" in r.stdout and "## load_context  (read-only)" in r.stdout
    assert '"additionalProperties": false' in r.stdout


def test_http_refuses_to_serve_without_auth(cli: Cli, env: dict[str, str]) -> None:
    r = cli(["serve", "--http"], env | {"MONGOGATE_AUTH__TENANT": "acme"})
    assert r.returncode == 2 and "refusing to serve HTTP without authentication" in r.stderr
    r = cli(
        ["serve", "--http", "--insecure-no-auth", "--host", "0.0.0.0"], env | {"MONGOGATE_AUTH__TENANT": "a"}
    )
    assert r.returncode == 2 and "loopback" in r.stderr


def test_serve_http_demo_runs_the_example_client(env: dict[str, str]) -> None:
    """What `make run` starts, and the example client from the README against it."""
    port = free_port()
    proc = subprocess.Popen(
        [*EXE, "serve", "--http", "--demo", "--config", "examples/mongogate.toml", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        banner = ""
        deadline = time.time() + 60
        while "export MONGOGATE_TOKEN=" not in banner and time.time() < deadline:
            line = proc.stderr.readline()  # type: ignore[union-attr]
            if not line:
                break
            banner += line
        m = re.search(r"export MONGOGATE_TOKEN=(\S+)", banner)
        assert m, banner
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        client = subprocess.run(
            [
                sys.executable,
                "examples/http_client.py",
                "--url",
                f"http://127.0.0.1:{port}/mcp",
                "--token",
                m[1],
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert client.returncode == 0, client.stderr + client.stdout
        assert "find_orders status=paid" in client.stdout and "AC-10" in client.stdout
        assert "operator_not_allowed" in client.stdout
        assert "orders and total per status this year" in client.stdout and "stage_forbidden" in client.stdout
        assert "returns the stored answer: True" in client.stdout
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert out == ""  # nothing on stdout


@pytest.mark.anyio
async def test_stdio_server_uses_configured_tenant(env: dict[str, str]) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mongogate.cli", "serve", "--demo"],
        env={k: env[k] for k in env if k.startswith("MONGOGATE_")} | {"MONGOGATE_AUTH__TENANT": "globex"},
        cwd=str(ROOT),
    )
    async with Client(params) as c:
        r = await c.call_tool("find_orders", {"filter": {}, "limit": 50})
        assert not r.is_error, r.content
        numbers = [d["number"] for d in r.structured_content["documents"]]
        assert len(numbers) == 12 and all(n.startswith("GL-") for n in numbers)
        sid = (await c.call_tool("create_session", {})).structured_content["session_id"]
        assert sid
        # stdio speaks 2026-07-28 too: no listen stream, and discover promises none (issue 36)
        assert c.protocol_version == "2026-07-28"
        caps = c.server_capabilities
        assert caps is not None and caps.tools is not None and not caps.tools.list_changed
        assert caps.resources is not None and not caps.resources.subscribe
        with pytest.raises(MCPError) as listen:
            async with c.listen(tools_list_changed=True):
                pass
        assert listen.value.error.code == -32601 and "publishes no events" in listen.value.error.message


def test_stdio_without_tenant_exits_with_explanation(cli: Cli, env: dict[str, str]) -> None:
    r = cli(["serve"], env)
    assert r.returncode == 2
    assert "MONGOGATE_AUTH__TENANT" in r.stderr and r.stdout == ""


def test_audit_prints_matching_events_and_a_summary(cli: Cli, env: dict[str, str], tmp_path: Path) -> None:
    from mongogate.audit.log import AuditLog

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, redact_values=False, max_value_chars=64, stream=None)
    for tenant, reason in (
        ("acme", "operator_not_allowed"),
        ("acme", "field_not_allowed"),
        ("globex", "too_deep"),
    ):
        log.filter_rejected(
            tool="find_orders",
            tenant=tenant,
            principal="dev",
            reason=reason,
            path="filter.x",
            filter={},
            request_id="1",
        )
    r = cli(["audit", "--path", str(path), "--tenant", "acme", "--since", "1h"], env)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith('{"event"')]  # JSON Lines
    assert len(lines) == 2 and all('"tenant": "acme"' in line for line in lines)
    r = cli(["audit", "--path", str(path), "--tenant", "acme", "--since", "1h", "--format", "table"], env)
    assert "2 rejected filter(s)" in r.stdout
    assert "by reason: operator_not_allowed 1, field_not_allowed 1" in r.stdout
    r = cli(["audit", "--path", str(path), "--reason", "too_deep", "--format", "table"], env)
    assert "1 rejected filter(s)" in r.stdout and "by tool: find_orders 1" in r.stdout


def test_stdio_stdout_carries_only_json_rpc_even_on_rejections(env: dict[str, str], tmp_path: Path) -> None:
    """A rejected filter is audited to stderr and the audit file; stdout stays pure protocol."""
    import json

    env = env | {"MONGOGATE_AUTH__TENANT": "acme", "MONGOGATE_AUDIT__PATH": str(tmp_path / "audit.jsonl")}
    messages: list[dict[str, Any]] = [
        *INITIALIZE,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "find_orders", "arguments": {"filter": {"$where": "1"}}},
        },
    ]
    proc = stdio_serve(env, "--demo")
    assert proc.stdin is not None and proc.stdout is not None
    replies = []
    try:
        for m in messages:
            send(proc, m)
            if "id" in m:
                replies.append(json.loads(proc.stdout.readline()))
    finally:
        proc.stdin.close()  # end of input: the server exits
        proc.wait(timeout=30)
    rest = proc.stdout.read()
    err = proc.stderr.read()  # type: ignore[union-attr]
    proc.stdout.close()
    proc.stderr.close()  # type: ignore[union-attr]
    assert all(r["jsonrpc"] == "2.0" for r in replies)
    assert replies[1]["result"]["isError"] is True
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in rest.splitlines() if line.strip())
    assert '"event":"filter_rejected"' in err  # the audit event went to stderr...
    assert '"reason":"operator_not_allowed"' in (tmp_path / "audit.jsonl").read_text()  # ...and the file


def test_serve_parses_without_importing_the_scheduler() -> None:
    """`serve` start-up never pays for the scheduler: the arguments of `worker` and `schedule`
    (which import it) are added only when one of those is the command (`schedule` used to add
    them always)."""
    code = (
        "import sys; from mongogate.cli import build_parser; build_parser(['serve']); "
        "print(sorted(m for m in sys.modules if m.startswith('mongogate.scheduler')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_named_command_imports_no_other_commands_module() -> None:
    """`mongogate serve` imports and registers only `serve`'s module: the other thirteen commands'
    modules were imported at every start (about 8 ms of `serve`'s, quiet machine)."""
    names = ["check", "audit", "token", "engine", "memory", "spec", "client_config", "config_doc"]
    others = [f"mongogate.cli.{m}" for m in [*names, "erase", "worker", "schedule", "try_tool"]]
    code = (
        "import sys; from mongogate.cli import build_parser; build_parser(['-v', 'serve']); "
        f"print(sorted(set({others!r}) & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["tools"], "tools"),
        (["check"], "check"),
        (["-v", "try", "find_orders", "--tenant", "acme", "--args", "{}"], "try"),
        (["config-doc"], "config-doc"),
    ],
)
def test_a_command_parses_alone_as_among_all(argv: list[str], command: str) -> None:
    """Registered alone (its module only) or with every command (no command named: help), a
    command's arguments parse the same."""
    from mongogate.cli import build_parser

    alone = vars(build_parser(argv).parse_args(argv))
    among_all = vars(build_parser(None).parse_args(argv))
    assert alone["command"] == command
    assert alone == among_all


def test_an_unknown_command_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    from mongogate.cli import COMMANDS, main

    with pytest.raises(SystemExit) as stopped:
        main(["serv"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'serv'" in err
    assert all(f"'{name}'" in err for name in COMMANDS)


@pytest.mark.parametrize("argv", [["serve", "--bogus"], ["-v", "tools", "extra"], ["engine", "start", "x"]])
def test_a_named_commands_mistake_shows_the_usage_with_every_command(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The usage line of a refused command line lists every command, as it did when all were
    registered (it read `{serve} ...` with only `serve`'s module registered, as if no other
    command existed)."""
    from mongogate.cli import build_parser

    said = []
    for parser in (build_parser(argv), build_parser(None)):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        said.append(capsys.readouterr().err)
    assert said[0] == said[1]


def test_worker_and_schedule_still_parse_their_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    from mongogate.cli import build_parser

    args = build_parser(["worker", "--status", "--state", "late"]).parse_args(
        ["worker", "--status", "--state", "late"]
    )
    assert (args.command, args.status, args.state) == ("worker", True, ["late"])
    args = build_parser(["schedule", "list", "--state", "paused"]).parse_args(
        ["schedule", "list", "--state", "paused"]
    )
    assert (args.command, args.action, args.state) == ("schedule", "list", ["paused"])
    with pytest.raises(SystemExit):
        build_parser(["schedule", "list", "--state", "nope"]).parse_args(
            ["schedule", "list", "--state", "nope"]
        )
    assert "invalid choice" in capsys.readouterr().err
