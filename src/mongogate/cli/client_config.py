"""`mongogate client-config CLIENT`: what Claude Desktop, Cursor, VS Code, Claude Code or the MCP
Inspector needs to start (stdio) or reach (`--http URL`) this server, ready to paste.

stdout holds only the paste: a JSON block in the client's own shape (`mcpServers`, or `servers`
for VS Code) or one command line (`claude mcp add`, the Inspector). Where the file lives on each
OS, and what to do with a token, go to stderr. Every path is absolute (the installed `mongogate`,
the config file, the data directory): a desktop client starts servers from its own working
directory, with an environment of its own.
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
INSPECTOR = "@modelcontextprotocol/inspector"
#: what a token placeholder reads from when none is given (the shell's, or the client's ${env:})
TOKEN_ENV = "MONGOGATE_TOKEN"

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
        "run it in a shell (Node.js 18+); the Inspector opens at http://localhost:6274",
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
    if client == "claude-code":
        env_opts = [w for k, v in launch.env.items() for w in ("--env", f"{k}={v}")]
        words = ["claude", "mcp", "add", "--transport", "stdio", *env_opts, name, "--", launch.command]
    else:  # the Inspector: `--` before the server's options, or its own --config takes the server's
        env_opts = [w for k, v in launch.env.items() for w in ("-e", f"{k}={v}")]
        words = ["npx", INSPECTOR, *env_opts, "--", launch.command]
    words += launch.args
    return shlex.join(words) + "\n"


def render_http(client: str, url: str, token: str | None, name: str) -> str:
    if client in ("cursor", "vscode"):
        bearer = f"Bearer {token}" if token else f"Bearer ${{env:{TOKEN_ENV}}}"
        entry: dict[str, Any] = {"url": url, "headers": {"Authorization": bearer}}
        if client == "cursor":
            return _json({"mcpServers": {name: entry}})
        return _json({"servers": {name: {"type": "http", **entry}}})
    if client == "claude-desktop":  # its config file starts commands: mcp-remote bridges to HTTP
        entry = {
            "command": "npx",
            "args": ["-y", "mcp-remote", url, "--header", "Authorization:${AUTH_HEADER}"],
            "env": {"AUTH_HEADER": f"Bearer {token or 'PASTE-YOUR-TOKEN-HERE'}"},
        }
        return _json({"mcpServers": {name: entry}})
    header = f"Authorization: Bearer {shlex.quote(token) if token else '$' + TOKEN_ENV}"
    if client == "claude-code":
        words = f"claude mcp add --transport http {shlex.quote(name)} {shlex.quote(url)}"
    else:
        words = f"npx {INSPECTOR} --cli {shlex.quote(url)} --transport http --method tools/list"
    return f'{words} --header "{header}"\n'


def cmd_client_config(args: argparse.Namespace) -> int:
    client: str = args.client
    name: str = args.name
    if args.http:
        if not args.http.startswith(("http://", "https://")):
            raise ConfigError(
                f"--http {args.http!r} must be the server's MCP URL, e.g. http://127.0.0.1:8000/mcp"
            )
        sys.stdout.write(render_http(client, args.http, args.token, name))
        notes = list(WHERE[client])
        if not args.token:
            notes.append(
                f"the bearer token: `mongogate token --tenant T` (development), or your identity provider's; "
                f"export {TOKEN_ENV}=... before starting the client, or pass --token"
            )
        if client == "inspector":
            notes.append(
                "Inspector versions before --header: open the UI, choose Streamable HTTP and add the header"
            )
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
    c.add_argument("--token", help="HTTP: the bearer token to write in (default: read from $MONGOGATE_TOKEN)")
    c.add_argument("--name", default="mongogate", help="the server's name in the client (default mongogate)")
    c.set_defaults(func=cmd_client_config)
