"""`mongogate schedule list|pause|resume|run-now|remove|prune`: manage a running fleet's schedules.

Each action is one write to the database; every worker sees it at its next scan, and none
races a claim (see mongogate.scheduler.manage). Output goes to stdout, errors to stderr.

    mongogate schedule list [--json] [--state S] [--agent PATTERN]
    mongogate schedule pause|resume|run-now AGENT
    mongogate schedule remove AGENT [--force]
    mongogate schedule prune [--dry-run]
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from mongogate.cli.common import settings_from
from mongogate.clock import SYSTEM_CLOCK
from mongogate.config import Settings

T = TypeVar("T")


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{os.uname().nodename}"


def _with_db(settings: Settings, fn: Callable[[Any], Awaitable[T]]) -> T:
    from mongogate.db import Database

    async def main() -> T:
        db = Database(settings.database, settings.server.data_dir)
        await db.open()
        try:
            await db.ping()
            return await fn(db)
        finally:
            await db.close()

    return anyio.run(main)


def cmd_schedule(args: argparse.Namespace) -> int:
    from mongogate.assembly import build_scheduler, schedules

    settings = settings_from(args)
    now = SYSTEM_CLOCK.now()
    action = args.action
    if action == "list":
        statuses = _with_db(settings, lambda db: build_scheduler(settings, db, []).status(now))
        return _list(args, statuses)
    if action == "prune":
        pruned = _with_db(settings, lambda db: schedules(settings, db).prune(now, dry_run=args.dry_run))
        return _pruned(args, pruned)
    key = args.agent_key
    out = sys.stdout
    if action == "pause":
        changed = _with_db(settings, lambda db: schedules(settings, db).pause(key, now, _who()))
        out.write(f"{key}: paused\n" if changed else f"{key}: already paused\n")
    elif action == "resume":
        changed = _with_db(settings, lambda db: schedules(settings, db).resume(key, now))
        out.write(f"{key}: resumed\n" if changed else f"{key}: was not paused\n")
    elif action == "run-now":
        _with_db(settings, lambda db: schedules(settings, db).run_now(key, now, _who()))
        out.write(f"{key}: one tick requested now (a worker runs it at its next scan)\n")
    elif action == "remove":
        _with_db(settings, lambda db: schedules(settings, db).remove(key, now, force=args.force))
        out.write(f"{key}: schedule removed\n")
    return 0


def _list(args: argparse.Namespace, statuses: Any) -> int:
    """`schedule list`: the chosen agents' schedules, as JSON lines or a table."""
    from mongogate.scheduler import select

    out = sys.stdout
    chosen = select(statuses, args.state or (), args.agent)
    if args.json:
        for st in chosen:
            row: dict[str, object] = {
                "agent_key": st.agent_key,
                "schedule": st.schedule,
                "state": st.state,
                "paused": st.paused,
            }
            row |= {"due_at": st.due_at, "next_run_at": st.next_run_at}
            out.write(json.dumps(row, default=lambda v: v.isoformat()) + "\n")
        return 0
    if not chosen:
        out.write("no agents are scheduled in this database (or none match)\n")
        return 0
    rows = [("agent", "state", "schedule", "next slot", "next run")]
    for st in chosen:
        due = st.due_at.isoformat(timespec="seconds") if st.due_at else "-"
        nxt = st.next_run_at.isoformat(timespec="seconds") if st.next_run_at else "-"
        rows.append((st.agent_key, st.state, st.schedule or "-", due, nxt))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    return 0


def _pruned(args: argparse.Namespace, pruned: Any) -> int:
    """`schedule prune`: what was (or would be) removed, and what was kept with a tick in flight."""
    out = sys.stdout
    verb = "would remove" if args.dry_run else "removed"
    out.write(f"{verb} {len(pruned.removed)} orphaned schedule document(s)\n")
    for key in pruned.removed[:20]:
        out.write(f"  {key}\n")
    if len(pruned.removed) > 20:
        out.write(f"  ... and {len(pruned.removed) - 20} more\n")
    if pruned.busy:
        out.write(f"kept {len(pruned.busy)} with a tick still in flight (prune again later)\n")
    return 0


def register(sub: Any, with_config: Any, *, arguments: bool) -> None:
    """`mongogate schedule`; with `arguments`, its actions too (their choices import the scheduler)."""
    p = sub.add_parser("schedule", help="list, pause, resume, run now, remove or prune agents' schedules")
    if arguments:
        _add_actions(p, with_config)


def _add_actions(p: argparse.ArgumentParser, with_config: Any) -> None:
    from mongogate.scheduler import STATES

    # `--config` before the action (`schedule --config F list`) or after it (`schedule list
    # --config F`): an action's default must not overwrite what `schedule` itself parsed
    with_config(p)

    def action(a: argparse.ArgumentParser) -> argparse.ArgumentParser:
        with_config(a, config_default=argparse.SUPPRESS)
        return a

    acts = p.add_subparsers(dest="action", required=True)
    ls = action(acts.add_parser("list", help="every schedule: agent, state, schedule, next slot"))
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    ls.add_argument("--state", action="append", choices=STATES, help="only agents in this state (repeatable)")
    ls.add_argument(
        "--agent", metavar="PATTERN", help="only agents matching this shell pattern (e.g. 'billing-*')"
    )
    for name, text in (
        ("pause", "stop claiming new ticks of AGENT (a tick in flight finishes)"),
        ("resume", "claim AGENT's ticks again (missed slots follow its misfire rules)"),
        ("run-now", "run one extra tick of AGENT at the next scan"),
        ("remove", "delete AGENT's schedule document"),
    ):
        a = action(acts.add_parser(name, help=text))
        a.add_argument("agent_key", metavar="AGENT")
        if name == "remove":
            a.add_argument("--force", action="store_true", help="even if a running worker registers AGENT")
    pr = action(acts.add_parser("prune", help="delete schedule documents of agents no worker registers"))
    pr.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    p.set_defaults(func=cmd_schedule)
