"""The official MCP conformance suite's server scenarios against `mongogate serve --http --demo`.

Not part of `make test` or `make bench` (it needs npx and the npm registry):

    npm install --prefix /tmp/conformance @modelcontextprotocol/conformance@0.1.16
    python benchmarks/conformance.py --conformance /tmp/conformance [--scenario prompts-list ...]

It starts `serve --http --demo --insecure-no-auth` on a free port with a fresh data directory,
seeds one session (a user message) and one memory, runs each scenario with
`conformance server --url ... --scenario S` and prints one line per scenario: PASS or FAIL and
the suite's first error. The default scenarios are the prompt and resource ones plus
`server-initialize`. Several expect the suite's own fixtures (a prompt named
`test_simple_prompt`, a resource `test://static-text`): mongogate fails those by design.
The suite 0.1.16 imports `fs.globSync` (Node >= 22); on Node 20 remove that one import from
its dist/index.js (only its `tier-audit` command uses it).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers import free_port, wait_for_port

SCENARIOS = [
    "server-initialize",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "resources-subscribe",
    "resources-unsubscribe",
]
MONGOGATE = Path(sys.executable).parent / "mongogate"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


async def seed(url: str) -> None:
    async with Client(streamable_http_client(url)) as c:
        made = await c.call_tool("create_session", {"title": "conformance"})
        assert made.structured_content is not None
        sid = made.structured_content["session_id"]
        await c.call_tool("append", {"session_id": sid, "turn_id": "t1", "role": "user", "content": "hi"})
        await c.call_tool("remember", {"text": "likes tea", "key": "user.drink"})


def run(conformance: Path, url: str, scenario: str) -> tuple[bool, str]:
    cli = conformance / "node_modules" / ".bin" / "conformance"
    out = subprocess.run(
        [str(cli), "server", "--url", url, "--scenario", scenario],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=tempfile.gettempdir(),
    )
    text = _ANSI.sub("", out.stdout + out.stderr)
    passed = re.search(r"Passed: (\d+)/(\d+), (\d+) failed", text)
    ok = bool(passed) and passed is not None and passed.group(3) == "0" and passed.group(1) != "0"
    error = next((line.strip() for line in text.splitlines() if "Error:" in line), "")
    return ok, error[:200]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conformance", type=Path, required=True, help="npm prefix holding the suite")
    p.add_argument("--scenario", action="append", help="run only these (repeatable)")
    a = p.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        env = os.environ | {
            "MONGOGATE_SERVER__DATA_DIR": data,
            "MONGOGATE_AUTH__MODE": "none",
            "MONGOGATE_AUTH__TENANT": "acme",
        }
        args = ["serve", "--http", "--demo", "--insecure-no-auth", "--port", str(port)]
        proc = subprocess.Popen([str(MONGOGATE), *args], env=env, stderr=subprocess.DEVNULL, text=True)
        try:
            wait_for_port(port, proc)
            url = f"http://127.0.0.1:{port}/mcp"
            anyio.run(seed, url)
            results = [(s, *run(a.conformance, url, s)) for s in a.scenario or SCENARIOS]
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            subprocess.run([str(MONGOGATE), "engine", "stop"], env=env, check=False)
    for scenario, ok, error in results:
        print(f"{'PASS' if ok else 'FAIL'}  {scenario:32} {error}")
    print(f"{sum(ok for _, ok, _ in results)}/{len(results)} passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
