"""Issue 19, items 3 and 4, as attacks on a running server: the engine's socket, the audit record.

Used by benchmarks/redteam.py. The engine attack runs as `nobody` (setpriv), so it needs root;
without root it is SKIPPED, never HELD.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from lib.redteam_base import (
    FAILED,
    ROOT,
    SKIPPED,
    Outcome,
    Target,
    call,
    clean_env,
    connect,
    short,
    verdict,
)
from tests.helpers import EXE, free_port
from tests.test_engine_isolation import NOBODY, _as_nobody

from mongogate.audit.read import read_events
from mongogate.engine import client as engine_client

WHERE = {"$where": "sleep(9000) || true"}
#: (name, tool, arguments, the operator the refused call's event must list)
DODGES: list[tuple[str, str, dict[str, Any], str]] = [
    ("$where after 50 ordinary keys", "find_orders", {"filter": {f"k{i}": 1 for i in range(50)} | WHERE},
     "$where"),
    ("$where under a key that collides when clipped to 64", "find_orders",
     {"filter": {"k" * 80 + "1": WHERE, "k" * 80 + "2": 1}}, "$where"),
    ("$function in a find", "find_orders",
     {"filter": {"$expr": {"$function": {"body": "function() { return true }", "args": [], "lang": "js"}}}},
     "$function"),
    ("$where in a later pipeline stage", "order_stats",
     {"pipeline": [{"$match": {"status": "paid"}}, {"$group": {"_id": "$status", "n": {"$count": {}}}},
                   {"$match": WHERE}]}, "$where"),
]  # fmt: skip


async def engine_socket(t: Target) -> Outcome:
    attempted = (
        "as uid 65534 (setpriv): connect to the engine's socket, send a 47 MB header; read engine.json"
    )
    expected = "every attempt PermissionError; tenants' calls still served by the same engine"
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        return Outcome(
            3, "another user reaches the engine", attempted, expected, "needs root and setpriv", SKIPPED
        )
    before = engine_client.status(t.data)
    assert before is not None, "no engine is running for the server's data directory"
    attack = await asyncio.to_thread(_as_nobody, before.address, str(t.data))
    async with connect(t.url, t.token("quiet")) as c:
        got, err = await call(c, "find_orders", filter={"status": "paid"}, limit=5)
    after = engine_client.status(t.data)
    refused = set(attack.values()) == {"PermissionError"}
    same = after is not None and after.pid == before.pid
    return Outcome(
        3,
        "another user reaches the engine",
        attempted,
        expected,
        f"{attack}; quiet tenant {'served' if err is None else short(err, 40)} "
        f"({got.get('returned')} orders), engine pid {'unchanged' if same else 'CHANGED'}",
        verdict(refused and err is None and same),
    )


def _rejected(audit: Path) -> list[dict[str, Any]]:
    return [
        e for e in read_events(audit) if e.get("event") == "filter_rejected" and e.get("tenant") == "dodger"
    ]


async def audit_dodges(t: Target) -> list[Outcome]:
    out = []
    async with connect(t.url, t.token("dodger")) as c:
        for name, tool, args, operator in DODGES:
            before = len(_rejected(t.audit))
            _, err = await call(c, tool, **args)
            deadline = time.monotonic() + 10  # the audit writer is a queue: wait for the event, capped
            while len(_rejected(t.audit)) == before and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await call(c, "find_orders", filter={"status": "paid"}, limit=1)  # an allowed call in between
            new = _rejected(t.audit)[before:]
            listed = [[f["name"] for f in e.get("forbidden", [])] for e in new]
            held = err is not None and err.startswith("[") and len(new) == 1 and operator in listed[0]
            out.append(
                Outcome(
                    4,
                    f"audit: {name}",
                    f"{tool} {short(str(args), 60)}",
                    f"refused; exactly one filter_rejected event listing {operator}",
                    f"{short(err, 40)}; {len(new)} event(s), forbidden = {listed}",
                    verdict(held),
                )
            )
    return out


def _serve_with(t: Target, audit_path: Path) -> subprocess.CompletedProcess[str]:
    """A second `serve` whose config differs only in audit.path: it must refuse to start."""
    text = t.config.read_text().replace(f'path = "{t.audit}"', f'path = "{audit_path}"')
    config = t.tmp / f"refused-{audit_path.parent.name}.toml"
    config.write_text(text)
    cmd = [*EXE, "serve", "--http", "--port", str(free_port()), "--config", str(config)]
    try:
        return subprocess.run(
            cmd,
            env=clean_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:  # it started serving: the defence gave way
        return subprocess.CompletedProcess(cmd, -1, "", f"{FAILED}: still serving after 90 s")


def audit_files(t: Target) -> list[Outcome]:
    shared = t.tmp / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # any local user may plant or rename here
    r1 = _serve_with(t, shared / "audit.jsonl")
    first = (r1.stderr.strip().splitlines() or [""])[0]
    held1 = (
        r1.returncode == 2
        and "writable by other users" in r1.stderr
        and not (shared / "audit.jsonl").exists()
    )
    planted = t.tmp / "planted"
    planted.mkdir(mode=0o700)
    target = t.tmp / "precious"
    target.write_text("precious\n")
    target.chmod(0o644)
    (planted / "audit.jsonl").symlink_to(target)
    if os.getuid() == 0:  # planted by another user, as an attacker would
        os.chown(planted / "audit.jsonl", NOBODY, NOBODY, follow_symlinks=False)
    r2 = _serve_with(t, planted / "audit.jsonl")
    second = (r2.stderr.strip().splitlines() or [""])[0]
    untouched = target.read_text() == "precious\n" and target.stat().st_mode & 0o777 == 0o644
    held2 = r2.returncode == 2 and "symlink" in r2.stderr and untouched and "Traceback" not in r2.stderr
    return [
        Outcome(
            4,
            "audit file in a world-writable directory",
            "serve with audit.path in a 0777 directory",
            "start-up refused (exit 2) with a clear error, no file created",
            f"exit {r1.returncode}: {short(first, 80)}",
            verdict(held1),
        ),
        Outcome(
            4,
            "planted audit.jsonl symlink",
            "serve with audit.jsonl -> a 0644 file of root's",
            "start-up refused (exit 2) naming the symlink; the target unchanged",
            f"exit {r2.returncode}: {short(second, 80)}; target {'unchanged' if untouched else 'CHANGED'}",
            verdict(held2),
        ),
    ]
