"""`mongogate client-config CLIENT`: each printed configuration works with its client.

- stdio: each output, read as its client reads it, starts a server the SDK's stdio client lists
  and calls; the JSON files match their clients' documented shapes;
- with the real clients from the npm registry (tests/npm_clients.py; skipped, with the reason,
  when npm is out of reach), in a fresh HOME: the printed `claude mcp add` line, run in a shell,
  makes `claude mcp list` show the server Connected (stdio and HTTP); the printed Inspector line
  lists the tools; the Claude Desktop HTTP entry, started as Claude Desktop starts it (`npx -y
  mcp-remote ...`), reaches the server with its token;
- one token rule: a reference to $MONGOGATE_TOKEN where the client resolves one (never the token
  in the file), the token itself only for Claude Desktop, with a warning on stderr.

examples/mcp_servers.json is what the command prints.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from jsonschema import Draft202012Validator
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mongogate.cli.client_config import CLIENTS
from tests.conftest import Cli
from tests.helpers import EXE, ROOT, free_port, wait_for_port
from tests.npm_clients import client_env, npm_clients

URL = "http://127.0.0.1:8000/mcp"
SECRET = "client-config-test-secret-0123456789abcdef"

#: each JSON client's documented shape of one server entry (Claude Desktop: `mcpServers` of
#: commands; Cursor: `mcpServers` of commands or of `url` + `headers`; VS Code: `servers` with a
#: `type`, `inputs` beside them), as the tests read their documentation
_STRINGS: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
_COMMAND: dict[str, Any] = {
    "type": "object",
    "required": ["command"],
    "properties": {
        "command": {"type": "string", "minLength": 1},
        "args": {"type": "array", "items": {"type": "string"}},
        "env": _STRINGS,
    },
}
_REMOTE: dict[str, Any] = {
    "type": "object",
    "required": ["url"],
    "properties": {"url": {"type": "string", "pattern": "^https?://"}, "headers": _STRINGS},
}


def _file(top: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": [top],
        "properties": {top: {"type": "object", "minProperties": 1, "additionalProperties": entry}},
    }


SHAPES: dict[str, dict[str, Any]] = {
    "claude-desktop": _file("mcpServers", {**_COMMAND, "additionalProperties": False}),
    "cursor": _file(
        "mcpServers",
        {
            "oneOf": [
                {**_COMMAND, "properties": {**_COMMAND["properties"], "envFile": {"type": "string"}}},
                _REMOTE,
            ],
            "propertyNames": {"enum": ["command", "args", "env", "envFile", "url", "headers", "type"]},
        },
    ),
    "vscode": _file(
        "servers",
        {
            "oneOf": [
                {
                    **_COMMAND,
                    "required": ["type", "command"],
                    "properties": {**_COMMAND["properties"], "type": {"const": "stdio"}},
                },
                {
                    **_REMOTE,
                    "required": ["type", "url"],
                    "properties": {**_REMOTE["properties"], "type": {"enum": ["http", "sse"]}},
                },
            ],
            "propertyNames": {"enum": ["type", "command", "args", "env", "envFile", "cwd", "url", "headers"]},
        },
    ),
}


@pytest.fixture
def config(tmp_path: Path, engine_uri: str, db_name: str) -> Path:
    """A user's config: the database (the session engine here) and a relative data directory."""
    path = tmp_path / "conf" / "mongogate.toml"
    path.parent.mkdir()
    path.write_text(f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n[server]\ndata_dir = "data"\n')
    return path


def no_token_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}


def launch_of(client: str, out: str) -> tuple[str, list[str], dict[str, str]]:
    """The command, arguments and environment, read from the output as the client reads it."""
    if client in SHAPES:
        data = json.loads(out)
        Draft202012Validator(SHAPES[client]).validate(data)
        [(name, entry)] = data["servers" if client == "vscode" else "mcpServers"].items()
        assert name == "mongogate"
        return entry["command"], entry["args"], entry["env"]
    words = shlex.split(out)
    if client == "claude-code":  # claude mcp add NAME --transport stdio --env K=V ... -- COMMAND ARGS
        assert words[:6] == ["claude", "mcp", "add", "mongogate", "--transport", "stdio"], out
        start, flag = 6, "--env"
    else:  # npx INSPECTOR --cli --connect-timeout MS --method tools/list -e K=V ... -- COMMAND ARGS
        assert words[:3] == ["npx", "@modelcontextprotocol/inspector@2", "--cli"], out
        assert words[words.index("--method") + 1] == "tools/list"
        assert int(words[words.index("--connect-timeout") + 1]) >= 60_000  # a cold start: 9-23 s seen
        start, flag = words.index("-e"), "-e"
    cut = words.index("--")
    options, (command, *args) = words[start:cut], words[cut + 1 :]
    assert options[::2] == [flag] * (len(options) // 2), out  # only the environment before `--`
    env = dict(value.split("=", 1) for value in options[1::2])
    return command, args, env


@pytest.mark.anyio
@pytest.mark.parametrize("client", CLIENTS)
async def test_each_printed_stdio_config_starts_a_server_the_sdk_lists_and_calls(
    client: str, cli: Cli, config: Path, tmp_path: Path
) -> None:
    r = cli(["client-config", client, "--config", str(config), "--tenant", "acme", "--demo"], no_token_env())
    assert r.returncode == 0, r.stderr
    command, args, env = launch_of(client, r.stdout)
    assert Path(command).is_absolute() and Path(command).name == "mongogate"
    assert args[:3] == ["serve", "--config", str(config)] and args[3:] == ["--demo"]
    assert env["MONGOGATE_SERVER__DATA_DIR"] == str(config.parent / "data")
    assert env["MONGOGATE_AUTH__TENANT"] == "acme"
    assert "paste" in r.stderr or "run it" in r.stderr
    # the client starts it from elsewhere, with only what it was told (the SDK passes HOME, PATH...)
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(tmp_path))
    async with Client(params) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"create_session", "find_orders"} <= names
        made = await c.call_tool("create_session", {"title": client})
        assert not made.is_error, made.content
        found = await c.call_tool("find_orders", {"filter": {"status": "paid"}, "limit": 3})
        assert not found.is_error, found.content
        docs = (found.structured_content or {})["documents"]
        assert docs and all(d["number"].startswith("AC-") for d in docs)  # tenant acme


@pytest.mark.parametrize("client", ["cursor", "vscode", "claude-code", "inspector"])
def test_clients_that_resolve_a_reference_get_the_reference_never_the_token(client: str, cli: Cli) -> None:
    """The token never lands in a file (or a shell history): not from --token, not from the env."""
    env = {**no_token_env(), "MONGOGATE_TOKEN": "tok-from-env"}
    r = cli(["client-config", client, "--http", URL, "--token", "tok-from-flag"], env)
    assert r.returncode == 0, r.stderr
    assert "tok-from" not in r.stdout
    reference = {"cursor": "${env:MONGOGATE_TOKEN}", "vscode": "${env:MONGOGATE_TOKEN}"}
    if client in reference:
        data: dict[str, Any] = json.loads(r.stdout)
        Draft202012Validator(SHAPES[client]).validate(data)
        entry = data["servers" if client == "vscode" else "mcpServers"]["mongogate"]
        assert entry["url"] == URL and entry["headers"] == {"Authorization": f"Bearer {reference[client]}"}
    else:
        words = shlex.split(r.stdout)  # as the shell splits it (quotes gone, nothing expanded)
        assert URL in words and words[words.index("--transport") + 1] == "http"
        header = words[words.index("--header") + 1]
        if client == "claude-code":  # single-quoted: Claude Code stores ${...} and expands it
            assert header == "Authorization: Bearer ${MONGOGATE_TOKEN}" and "'" in r.stdout
        else:  # double-quoted: the shell expands it when the line runs
            assert header == "Authorization: Bearer $MONGOGATE_TOKEN" and '"Authorization' in r.stdout
    assert "never written" in r.stderr and "--token is not written" in r.stderr


def test_claude_desktop_http_writes_the_token_from_the_env_or_the_flag_with_a_warning(cli: Cli) -> None:
    for env, argv, token in [
        ({**no_token_env(), "MONGOGATE_TOKEN": "tok-env"}, [], "tok-env"),  # was: PASTE-YOUR-TOKEN-HERE
        ({**no_token_env(), "MONGOGATE_TOKEN": "tok-env"}, ["--token", "tok-flag"], "tok-flag"),
        (no_token_env(), ["--token", "tok-flag"], "tok-flag"),
    ]:
        r = cli(["client-config", "claude-desktop", "--http", URL, *argv], env)
        assert r.returncode == 0, r.stderr
        data = json.loads(r.stdout)
        Draft202012Validator(SHAPES["claude-desktop"]).validate(data)
        entry = data["mcpServers"]["mongogate"]
        assert entry["command"] == "npx" and entry["args"][:3] == ["-y", "mcp-remote", URL]
        assert entry["env"] == {"AUTH_HEADER": f"Bearer {token}"}
        assert "warning: the bearer token is written in clear" in r.stderr


def test_claude_desktop_http_without_a_token_says_how_to_give_one(cli: Cli) -> None:
    r = cli(["client-config", "claude-desktop", "--http", URL], no_token_env())
    assert r.returncode == 2 and r.stdout == ""
    assert "MONGOGATE_TOKEN" in r.stderr and "--token" in r.stderr


def test_a_stdio_config_needs_a_tenant(cli: Cli, config: Path) -> None:
    r = cli(["client-config", "cursor", "--config", str(config)])
    assert r.returncode == 2 and "--tenant" in r.stderr


def test_the_example_file_is_what_the_command_prints(cli: Cli) -> None:
    """examples/mcp_servers.json: `mongogate client-config claude-desktop --config
    examples/mongogate.toml --tenant acme --demo`, with this checkout's path as /path/to/mongogate."""
    argv = [
        "client-config",
        "claude-desktop",
        "--config",
        "examples/mongogate.toml",
        "--tenant",
        "acme",
        "--demo",
    ]
    r = cli(argv, no_token_env())
    assert r.returncode == 0, r.stderr
    out = r.stdout.replace(str(Path(sys.executable).parent), "/path/to/mongogate/.venv/bin")
    printed = json.loads(out.replace(str(ROOT), "/path/to/mongogate"))
    assert json.loads((ROOT / "examples" / "mcp_servers.json").read_text()) == printed


# ---- the real clients, from the npm registry -------------------------------------------------


def shell(
    line: str, env: dict[str, str], cwd: Path, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """One printed line, pasted into bash."""
    return subprocess.run(
        ["bash", "-c", line], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def printed(cli: Cli, *argv: str, env: dict[str, str] | None = None) -> str:
    r = cli(["client-config", *argv], env if env is not None else no_token_env())
    assert r.returncode == 0, r.stderr
    return r.stdout


def listed(out: str, name: str = "mongogate") -> str:
    """The line `claude mcp list` prints for the server `name`."""
    [line] = [x for x in out.splitlines() if x.startswith(f"{name}:")]
    return line


@pytest.fixture(scope="module")
def jwt_server(
    tmp_path_factory: pytest.TempPathFactory, engine_uri: str, module_db: str
) -> Iterator[tuple[str, str]]:
    """`mongogate serve --http --demo` with JWT auth; yields its URL and a token minted by
    `mongogate token` for tenant acme."""
    conf = tmp_path_factory.mktemp("jwt") / "mongogate.toml"
    conf.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{module_db}"\n[server]\ndata_dir = "data"\n'
        f'[auth]\nmode = "jwt"\njwt_secret = "{SECRET}"\nissuer = "t"\naudience = "mongogate"\n'
    )
    env = {**no_token_env(), "PYTHONUNBUFFERED": "1"}
    token = subprocess.run(
        [*EXE, "token", "--config", str(conf), "--tenant", "acme"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.strip()
    port = free_port()
    proc = subprocess.Popen(
        [*EXE, "serve", "--http", "--demo", "--config", str(conf), "--port", str(port)],
        env=env,
        cwd=conf.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp", token
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


def test_claude_code_stdio_line_adds_a_server_claude_lists_as_connected(
    cli: Cli, config: Path, tmp_path: Path
) -> None:
    """Issue 40: the old line answered `Invalid environment variable format: mongogate`."""
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    env = client_env(home)
    line = printed(cli, "claude-code", "--config", str(config), "--tenant", "acme", "--demo")
    added = shell(line, env, project)
    assert added.returncode == 0, added.stdout + added.stderr
    shown = shell("claude mcp list", env, project)
    assert shown.returncode == 0, shown.stderr
    assert "✔ Connected" in listed(shown.stdout), shown.stdout


def test_claude_code_http_line_connects_with_the_token_it_never_stored(
    cli: Cli, jwt_server: tuple[str, str], tmp_path: Path
) -> None:
    url, token = jwt_server
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    line = printed(cli, "claude-code", "--http", url, env={**no_token_env(), "MONGOGATE_TOKEN": token})
    added = shell(line, client_env(home, MONGOGATE_TOKEN=token), project)  # exported, as a user has it
    assert added.returncode == 0, added.stdout + added.stderr
    stored = (home / ".claude.json").read_text()
    assert token not in stored and "Bearer ${MONGOGATE_TOKEN}" in stored
    with_token = shell("claude mcp list", client_env(home, MONGOGATE_TOKEN=token), project)
    assert "✔ Connected" in listed(with_token.stdout), with_token.stdout
    without = shell("claude mcp list", client_env(home), project)
    assert "Connected" not in listed(without.stdout) and "MONGOGATE_TOKEN" in without.stdout, without.stdout


def tool_names(inspector_out: str) -> set[str]:
    return {t["name"] for t in json.loads(inspector_out)["tools"]}


def test_inspector_stdio_line_lists_the_tools(cli: Cli, config: Path, tmp_path: Path) -> None:
    line = printed(cli, "inspector", "--config", str(config), "--tenant", "acme", "--demo")
    # npx finds the installed Inspector in the prefix: the line runs as printed, without a download
    r = shell(line, client_env(tmp_path), npm_clients())
    assert r.returncode == 0, r.stderr[-3000:]
    assert {"create_session", "recall", "find_orders"} <= tool_names(r.stdout)


def test_inspector_http_line_lists_the_tools_with_the_exported_token(
    cli: Cli, jwt_server: tuple[str, str], tmp_path: Path
) -> None:
    url, token = jwt_server
    line = printed(cli, "inspector", "--http", url)
    r = shell(line, client_env(tmp_path, MONGOGATE_TOKEN=token), npm_clients())
    assert r.returncode == 0, r.stderr[-3000:]
    assert {"create_session", "find_orders"} <= tool_names(r.stdout)
    refused = shell(line, client_env(tmp_path, MONGOGATE_TOKEN="not-a-token"), npm_clients())
    assert refused.returncode != 0


@pytest.mark.anyio
async def test_claude_desktop_http_entry_reaches_the_server_through_mcp_remote(
    cli: Cli, jwt_server: tuple[str, str], tmp_path: Path
) -> None:
    """Started as Claude Desktop starts it: the entry's command (`npx -y mcp-remote ...`), its
    arguments and its env, nothing else (the token exported when the entry was printed)."""
    url, token = jwt_server
    out = printed(cli, "claude-desktop", "--http", url, env={**no_token_env(), "MONGOGATE_TOKEN": token})
    entry = json.loads(out)["mcpServers"]["mongogate"]
    env = {**client_env(tmp_path), **entry["env"]}
    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], env=env, cwd=str(npm_clients())
    )
    async with Client(params) as c:
        found = await c.call_tool("find_orders", {"filter": {"status": "paid"}, "limit": 2})
        assert not found.is_error, found.content
        assert all(d["number"].startswith("AC-") for d in (found.structured_content or {})["documents"])


@pytest.mark.anyio
@pytest.mark.parametrize("client", ["cursor", "vscode"])
async def test_cursor_and_vscode_http_entries_work_once_the_reference_is_resolved(
    client: str, cli: Cli, jwt_server: tuple[str, str]
) -> None:
    """Resolved as both document `${env:NAME}`: the value of NAME in the client's environment."""
    url, token = jwt_server
    data = json.loads(printed(cli, client, "--http", url))
    Draft202012Validator(SHAPES[client]).validate(data)
    entry = data["servers" if client == "vscode" else "mcpServers"]["mongogate"]
    headers = {
        k: re.sub(r"\$\{env:(\w+)\}", lambda m: {"MONGOGATE_TOKEN": token}[m.group(1)], v)
        for k, v in entry["headers"].items()
    }
    async with (
        httpx2.AsyncClient(headers=headers) as hc,
        Client(streamable_http_client(entry["url"], http_client=hc)) as c,
    ):
        found = await c.call_tool("find_orders", {"filter": {"status": "paid"}, "limit": 2})
        assert not found.is_error, found.content
