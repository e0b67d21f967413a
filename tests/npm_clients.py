"""The real MCP clients that install from the npm registry, for the tests that run a printed
client line as a user would: Claude Code (`claude`), the MCP Inspector (`mcp-inspector`) and
mcp-remote (what the Claude Desktop HTTP entry starts with `npx`).

Installed once into `.venv/npm-clients` (beside this interpreter, so `make clean` removes it) and
reused by later sessions and by both shards of `make test` (a lock file orders two installs). The
versions are pinned: a new release is a deliberate bump here. When npm is missing or its registry
does not answer, the tests that need these skip and say so; a registry that answers but an
install that fails is a failure.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = (
    "@anthropic-ai/claude-code@2.1.332",
    "@modelcontextprotocol/inspector@2.12.0",
    "mcp-remote@0.15.1",
)
HOME = Path(sys.prefix) / "npm-clients"
_skip: list[str] = []


def npm_clients() -> Path:
    """The install prefix, its `node_modules/.bin` holding `claude`, `mcp-inspector` and
    `mcp-remote` (the test calling this is skipped, with the reason, when npm is out of reach)."""
    if _skip:
        pytest.skip(_skip[0])
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        _skip.append("npm and node are not installed: the real clients come from the npm registry")
        pytest.skip(_skip[0])
    HOME.mkdir(exist_ok=True)
    stamp = HOME / "installed.json"
    with (HOME / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other shard may be installing: wait for it
        if stamp.exists() and json.loads(stamp.read_text()) == list(PACKAGES):
            return HOME
        env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false"}
        try:
            ping = subprocess.run([npm, "ping"], capture_output=True, text=True, timeout=60, env=env)
        except subprocess.TimeoutExpired:
            ping = subprocess.CompletedProcess([npm, "ping"], 1, "", "no answer in 60 s")
        if ping.returncode != 0:
            last = (ping.stderr.strip().splitlines() or ["no answer"])[-1]
            _skip.append(f"the npm registry is unreachable ({last}): the real clients cannot be installed")
            pytest.skip(_skip[0])
        r = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(HOME), *PACKAGES],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        assert r.returncode == 0, f"npm install {' '.join(PACKAGES)} failed:\n{r.stderr[-3000:]}"
        stamp.write_text(json.dumps(list(PACKAGES)))
    return HOME


def client_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's shell, bare: a fresh HOME, the clients and node on PATH, no MONGOGATE_* settings."""
    node = Path(shutil.which("node") or "/usr/bin/node").parent
    return {
        "HOME": str(home),
        "PATH": os.pathsep.join(
            [str(npm_clients() / "node_modules" / ".bin"), str(node), "/usr/bin", "/bin"]
        ),
        "LANG": "C.UTF-8",
        # Claude Code: no update checks, no telemetry (the machine reaches only the registries)
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "npm_config_update_notifier": "false",
        **extra,
    }
