"""The target of benchmarks/redteam.py: a real `mongogate serve --http` process, its config and tokens.

One configuration (JWT auth, the embedded engine of a private data directory, the audit file in
its own 0700 directory, `find_orders`, `order_stats` and a tight `order_stats_tight`), written as
TOML so the server reads it exactly as an operator's would. Attacks get a `Target` and return an
`Outcome`: what was attempted, what was expected, what was observed, and the verdict.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # tests/helpers.py and tests/server/rpc.py are reused, not copied
    sys.path.insert(0, str(ROOT))

from tests.helpers import EXE, free_port, wait_for_port  # noqa: E402

from mongogate.config import Settings, load_settings  # noqa: E402
from mongogate.server.auth.tokens import mint_dev_token  # noqa: E402

SECRET = "redteam-only-secret-0123456789abcdef-0123456789abcdef"
DB = "redteam"
HELD, FAILED, SKIPPED = "HELD", "FAILED", "SKIPPED"


@dataclass(frozen=True)
class Sizes:
    """How hard each attack pushes: `--quick` (a couple of minutes on a busy 2-core machine) or full."""

    message_bytes: int  # memory.max_message_bytes
    state_bytes: int  # memory.max_state_bytes
    response_bytes: int  # limits.max_response_bytes
    messages: int  # stored before load_context(limit=200)
    checkpoints: int  # saved before run_events(include_state)
    session_cap: int  # server.max_sessions_per_principal
    sessions: int  # opened by one token
    head_cap: int  # server.max_pending_heads_per_address
    half_open: int  # connections whose head never ends
    bodies: int  # withheld 4 MiB bodies
    flood_docs: int  # orders of tenant flood (seeding costs the square of it: mongoeco checks each insert)
    flooders: int
    alone_s: float
    flood_s: float
    wide_docs: int  # orders of 40 tags each for the max_groups attack (collection `wide`)


QUICK = Sizes(32 * 1024, 192 * 1024, 256 * 1024, 12, 4, 4, 16, 16, 48, 15, 600, 8, 3.0, 6.0, 200)
FULL = Sizes(256 * 1024, 1024 * 1024, 4 * 1024 * 1024, 24, 12, 32, 200, 64, 200, 60, 1000, 12, 6.0, 10.0, 400)


@dataclass
class Outcome:
    item: int
    name: str
    attempted: str
    expected: str
    observed: str
    verdict: str


def verdict(held: bool) -> str:
    return HELD if held else FAILED


def config_text(tmp: Path, sizes: Sizes, audit_path: Path, tight_ms: int) -> str:
    """The server's TOML: every limit the attacks meet is written out, not left to a default."""
    fields = '{ status = "string", total = "number", createdAt = "date", number = "string" }'
    agg_fields = fields[:-2] + ', tags = "string" }'
    common = 'collection = "orders"\ntenant_field = "userId"\nindex = [["userId", 1], ["createdAt", -1]]\n'
    agg = (
        'kind = "aggregate"\nprojection = ["number", "status", "total", "createdAt", "tags"]\n'
        f'fields = {agg_fields}\ngroup_fields = ["status", "createdAt", "tags"]\narray_fields = ["tags"]\n'
    )
    return f"""
[database]
name = "{DB}"

[server]
data_dir = "{tmp / "data"}"
body_timeout_s = 3
metrics = true
max_sessions_per_principal = {sizes.session_cap}
max_pending_heads_per_address = {sizes.head_cap}

[auth]
mode = "jwt"
jwt_secret = "{SECRET}"
issuer = "redteam"
audience = "mongogate"

[audit]
path = "{audit_path}"

[memory]
max_message_bytes = {sizes.message_bytes}
max_state_bytes = {sizes.state_bytes}

[limits]
max_response_bytes = {sizes.response_bytes}
tenant_concurrency = 4

[[query_tools]]
name = "find_orders"
description = "Find the caller's orders."
{common}projection = ["number", "status", "total", "createdAt"]
fields = {fields}
operators = ["$eq", "$ne", "$in", "$gt", "$gte", "$lt", "$lte", "$and", "$or"]
sort = {{ createdAt = -1 }}
max_limit = 50
max_time_ms = 2000

[[query_tools]]
name = "order_stats"
description = "Count the caller's orders."
{common}{agg}max_limit = 100
max_time_ms = 2000

[[query_tools]]
name = "order_stats_tight"
description = "Count the caller's orders, within a tight budget."
{common.replace('"orders"', '"wide"')}{agg}max_limit = 100
max_groups = 10
max_time_ms = {tight_ms}
"""


def clean_env() -> dict[str, str]:
    """The caller's environment without MONGOGATE_* (the config file alone decides), except
    MONGOGATE_TEST_* (the server reads none: its test hooks are arguments, `Target.exe`)."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MONGOGATE_") or k.startswith("MONGOGATE_TEST_")
    }


@dataclass
class Target:
    tmp: Path
    config: Path
    settings: Settings
    sizes: Sizes
    quick: bool
    port: int = 0
    pid: int = 0
    #: how the server is started: `mongogate`, or the test harness with a hook (`make_target`)
    exe: tuple[str, ...] = tuple(EXE)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def data(self) -> Path:
        return self.settings.server.data_dir

    @property
    def audit(self) -> Path:
        return self.settings.audit_path

    def token(self, tenant: str, subject: str = "redteam") -> str:
        return mint_dev_token(self.settings.auth, tenant=tenant, ttl_s=3600, subject=subject)

    @contextlib.contextmanager
    def serving(self) -> Iterator[Target]:
        """`mongogate serve --http --config <config>` in its own process, until the block ends."""
        self.port = free_port()
        log = (self.tmp / "server.log").open("a")
        cmd = [*self.exe, "serve", "--http", "--port", str(self.port), "--config", str(self.config)]
        proc = subprocess.Popen(cmd, env=clean_env(), cwd=ROOT, stdout=log, stderr=log, text=True)
        self.pid = proc.pid
        try:
            try:
                wait_for_port(self.port, proc)
            except AssertionError as e:  # its stderr went to the log: say why it did not start
                log.flush()
                tail = (self.tmp / "server.log").read_text().strip().splitlines()[-5:]
                raise RuntimeError(f"{e} {' | '.join(tail)}") from None
            yield self
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def make_target(tmp: Path, quick: bool, tight_ms: int, *, keep_freed_memory: bool = False) -> Target:
    """``keep_freed_memory``: serve through tests/fault_harness.py ``--keep-freed-memory`` (the
    memory of large bodies is kept once freed, the old behaviour: the slow-body verdict gives way)."""
    sizes = QUICK if quick else FULL
    (tmp / "audit").mkdir(mode=0o700, exist_ok=True)
    config = tmp / "mongogate.toml"
    config.write_text(config_text(tmp, sizes, tmp / "audit" / "audit.jsonl", tight_ms))
    exe = (sys.executable, "-m", "tests.fault_harness", "--keep-freed-memory") if keep_freed_memory else EXE
    return Target(tmp, config, load_settings(config), sizes, quick, exe=tuple(exe))


@contextlib.asynccontextmanager
async def connect(url: str, token: str) -> AsyncIterator[Client]:
    """The SDK's real client over HTTP with a bearer token."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as hc,
        Client(streamable_http_client(url, http_client=hc)) as c,
    ):
        yield c


async def call(c: Client, tool: str, **args: Any) -> tuple[dict[str, Any], str | None]:
    """(structured result, None) or ({}, the error text) of one tool call."""
    r = await c.call_tool(tool, args)
    if r.is_error:
        return {}, str(r.content[0].text)  # type: ignore[union-attr]
    return dict(r.structured_content or {}), None


def json_bytes(value: Any) -> int:
    """The size a cap is measured in: compact UTF-8 JSON."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def short(text: str | None, n: int = 90) -> str:
    text = "" if text is None else " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"
