"""`mongogate client-config CLIENT`: what Claude Desktop, Cursor, VS Code, Claude Code or the MCP
Inspector needs to start (stdio) or reach (`--http URL`) this server, ready to paste.

stdout holds only the paste: a JSON block in the client's own shape (`mcpServers`, or `servers`
for VS Code) or one command line (`claude mcp add`, the Inspector's `--cli`). Where the file lives
on each OS, and what to do with a token, go to stderr. Every path is absolute (the installed
`mongogate`, the config file, the data directory): a desktop client starts servers from its own
working directory, with an environment of its own.

One token rule (docs/clients.md): where the client resolves an environment reference in its
configuration, the output holds the reference to $MONGOGATE_TOKEN, never the token; only Claude
Desktop resolves none, so its entry holds the token itself (from --token or $MONGOGATE_TOKEN), with
a warning on stderr that it is written in clear.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mongogate.cli.common import settings_from
from mongogate.config import Settings
from mongogate.errors import ConfigError

CLIENTS = ("claude-desktop", "cursor", "vscode", "claude-code", "inspector")
#: the major version whose CLI has --cli --connect-timeout (on Node 20, npx without it picks 0.15)
INSPECTOR = "@modelcontextprotocol/inspector@2"
#: the Inspector's connect timeout (its default, 15 s, failed the first call of a cold start: a
#: stdio start-up took 9-23 s on a busy machine); covers the start-up, not a call
CONNECT_TIMEOUT_MS = 60_000
#: where the token comes from: the environment of the client, or of the shell running this
TOKEN_ENV = "MONGOGATE_TOKEN"
#: how each client writes a reference to an environment variable in its configuration, resolved
#: when it connects (each client's documented syntax); Claude Desktop has none
TOKEN_REFERENCE: dict[str, str] = {
    "cursor": f"${{env:{TOKEN_ENV}}}",
    "vscode": f"${{env:{TOKEN_ENV}}}",
    "claude-code": f"${{{TOKEN_ENV}}}",  # expanded by Claude Code in .mcp.json and ~/.claude.json
    "inspector": f"${TOKEN_ENV}",  # the shell's, when the line runs
}

WHERE: dict[str, list[str]] = {
    "claude-desktop": [
        'paste into claude_desktop_config.json (merge with any "mcpServers" there), then restart Claude:',
        "  macOS:   ~/Library/Application Support/Claude/claude_desktop_config.json",
        "  Windows: %APPDATA%\\Claude\\claude_desktop_config.json",
        "  Linux:   ~/.config/Claude/claude_desktop_config.json",
        "  (Settings > Developer > Edit Config opens it)",
    ],
    "cursor": [
        'paste into Cursor\'s mcp.json (merge with any "mcpServers" already there):',
        "  every project: ~/.cursor/mcp.json (Windows: %USERPROFILE%\\.cursor\\mcp.json)",
        "  one project:   .cursor/mcp.json in the project",
    ],
    "vscode": [
        'paste into VS Code\'s mcp.json (merge with any "servers" already there):',
        "  one workspace: .vscode/mcp.json in the workspace",
        "  your profile:  run 'MCP: Open User Configuration', or edit",
        "    macOS ~/Library/Application Support/Code/User/mcp.json, Linux ~/.config/Code/User/mcp.json,",
        "    Windows %APPDATA%\\Code\\User\\mcp.json",
    ],
    "claude-code": [
        "run it in a shell; Claude Code keeps it in ~/.claude.json (add --scope project for .mcp.json",
        "in the project); `claude mcp list` shows it",
    ],
    "inspector": [
        "run it in a shell (Node.js 20+): it connects, lists the tools and exits; for the web UI at",
        "http://localhost:6274, run it without --cli, --connect-timeout and --method (their CLI options)",
    ],
}


@dataclass(frozen=True)
class Stdio:
    """How to start the server: the absolute command, its arguments, and its environment."""

    command: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)


def mongogate_command() -> list[str]:
    """The installed `mongogate`, absolute: this interpreter's own script first (a virtualenv that
    is not activated), then PATH, else this interpreter running the module."""
    sibling = Path(sys.executable).parent / ("mongogate.exe" if os.name == "nt" else "mongogate")
    if sibling.is_file():
        return [str(sibling.absolute())]
    found = shutil.which("mongogate")
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "mongogate.cli"]


def stdio_launch(settings: Settings, tenant: str | None, demo: bool, name: str) -> Stdio:
    """The stdio launch: `serve --config ABS` with the data directory and the tenant in `env`."""
    tenant = tenant or settings.auth.tenant
    if not tenant:
        raise ConfigError(
            "a stdio server acts for one tenant: give --tenant T (or set auth.tenant in the config)"
        )
    exe, *pre = mongogate_command()
    args = [*pre, "serve"]
    if settings.config_file is not None:
        args += ["--config", str(Path(settings.config_file).absolute())]
    if demo:
        args.append("--demo")
    env = {
        "MONGOGATE_SERVER__DATA_DIR": str(settings.server.data_dir.expanduser().absolute()),
        # the client's own process: its one tenant, fixed at launch (no token to pass)
        "MONGOGATE_AUTH__MODE": "none",
        "MONGOGATE_AUTH__TENANT": tenant,
    }
    return Stdio(exe, args, env)


def _json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def render_stdio(client: str, launch: Stdio, name: str) -> str:
    entry: dict[str, Any] = {"command": launch.command, "args": launch.args, "env": launch.env}
    if client in ("claude-desktop", "cursor"):
        return _json({"mcpServers": {name: entry}})
    if client == "vscode":
        return _json({"servers": {name: {"type": "stdio", **entry}}})
    if client == "claude-code":  # the name first: `--env` takes every word after it up to `--`
        env_opts = [w for k, v in launch.env.items() for w in ("--env", f"{k}={v}")]
        words = ["claude", "mcp", "add", name, "--transport", "stdio", *env_opts, "--", launch.command]
    else:  # the Inspector: `--` before the server's options, or its own --config takes the server's
        env_opts = [w for k, v in launch.env.items() for w in ("-e", f"{k}={v}")]
        timeout = ["--connect-timeout", str(CONNECT_TIMEOUT_MS)]
        words = [
            "npx",
            INSPECTOR,
            "--cli",
            *timeout,
            "--method",
            "tools/list",
            *env_opts,
            "--",
            launch.command,
        ]
    words += launch.args
    return shlex.join(words) + "\n"


def render_http(client: str, url: str, token: str | None, name: str) -> str:
    """The client's entry for `url`; `token` is written only for Claude Desktop (see the module)."""
    if client == "claude-desktop":  # its config file starts commands: mcp-remote bridges to HTTP
        if not token:
            raise ConfigError(
                "Claude Desktop cannot read the token from its environment, so its entry holds the token: "
                f"export {TOKEN_ENV}=... (`mongogate token --tenant T`, or your identity provider's) "
                "or pass --token T"
            )
        entry: dict[str, Any] = {
            "command": "npx",
            "args": ["-y", "mcp-remote", url, "--header", "Authorization:${AUTH_HEADER}"],
            "env": {"AUTH_HEADER": f"Bearer {token}"},
        }
        return _json({"mcpServers": {name: entry}})
    bearer = f"Bearer {TOKEN_REFERENCE[client]}"
    if client in ("cursor", "vscode"):
        entry = {"url": url, "headers": {"Authorization": bearer}}
        if client == "cursor":
            return _json({"mcpServers": {name: entry}})
        return _json({"servers": {name: {"type": "http", **entry}}})
    if client == "claude-code":  # single quotes: Claude Code keeps ${...} and expands it on connect
        words = ["claude", "mcp", "add", name, "--transport", "http", url, "--header"]
        return f"{shlex.join(words)} 'Authorization: {bearer}'\n"
    words = ["npx", INSPECTOR, "--cli", url, "--transport", "http", "--method", "tools/list", "--header"]
    return f'{shlex.join(words)} "Authorization: {bearer}"\n'  # double quotes: the shell expands


def cmd_client_config(args: argparse.Namespace) -> int:
    client: str = args.client
    name: str = args.name
    if args.http:
        if not args.http.startswith(("http://", "https://")):
            raise ConfigError(
                f"--http {args.http!r} must be the server's MCP URL, e.g. http://127.0.0.1:8000/mcp"
            )
        token = args.token or os.environ.get(TOKEN_ENV) or None
        sys.stdout.write(render_http(client, args.http, token, name))
        notes = list(WHERE[client])
        if client == "claude-desktop":
            notes.append(
                "warning: the bearer token is written in clear in this entry (Claude Desktop resolves no "
                "environment reference): keep the file private, and paste a new entry when the token expires"
            )
        else:
            notes.append(
                f"the token is read from ${TOKEN_ENV} when the client connects ({TOKEN_REFERENCE[client]}), "
                f"never written: export {TOKEN_ENV}=... (`mongogate token --tenant T`, or your identity "
                "provider's) where the client starts"
            )
            if args.token:
                notes.append(f"--token is not written for {client}: give it as ${TOKEN_ENV} instead")
    else:
        settings = settings_from(args)
        launch = stdio_launch(settings, args.tenant, args.demo, name)
        sys.stdout.write(render_stdio(client, launch, name))
        notes = [
            *WHERE[client],
            f"tenant {launch.env['MONGOGATE_AUTH__TENANT']!r}; data directory "
            f"{launch.env['MONGOGATE_SERVER__DATA_DIR']}",
        ]
    sys.stdout.flush()
    for line in notes:
        print(line, file=sys.stderr)
    return 0


def register(sub: Any, with_config: Any) -> None:
    c = with_config(
        sub.add_parser(
            "client-config",
            help="print what Claude Desktop, Cursor, VS Code, Claude Code or the MCP Inspector needs",
        )
    )
    c.add_argument("client", choices=CLIENTS)
    c.add_argument("--http", metavar="URL", help="reach a running HTTP server (its MCP URL) instead of stdio")
    c.add_argument("--tenant", help="stdio: the tenant the client acts for (default: auth.tenant)")
    c.add_argument("--demo", action="store_true", help="stdio: serve the demo data and tools too")
    c.add_argument(
        "--token",
        help="HTTP, Claude Desktop only (the one client that cannot read $MONGOGATE_TOKEN itself): "
        "the bearer token to write in (default: $MONGOGATE_TOKEN)",
    )
    c.add_argument("--name", default="mongogate", help="the server's name in the client (default mongogate)")
    c.set_defaults(func=cmd_client_config)
