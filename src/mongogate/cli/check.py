"""`mongogate check` and `mongogate tools`: what an operator runs before serving."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

import anyio

from mongogate.cli.common import data_dir_line, registry_for, settings_from
from mongogate.cli.embed import HELP as EMBED_HELP
from mongogate.config import Settings
from mongogate.errors import ConfigError
from mongogate.specs import QueryToolSpec

if TYPE_CHECKING:
    from mongogate.tools.state import AppState


async def _check(
    settings: Settings, allow_writable: bool, specs: list[QueryToolSpec], sample_size: int
) -> int:
    from mongogate.assembly import build_services
    from mongogate.db import Database
    from mongogate.memory import retention_line
    from mongogate.privileges import check_query_user

    problems = 0
    embedded = len(specs) - len(settings.query_tools)
    print(
        f"config: ok ({len(specs)} query tool(s){f', {embedded} from --embed' if embedded else ''}, "
        f"auth mode {settings.auth.mode})"
    )
    print(data_dir_line(settings))
    db = Database(settings.database, settings.server.data_dir)
    await db.open()
    try:
        await db.ping()
        where = "embedded engine in " + str(settings.server.data_dir) if db.embedded else "database.uri"
        print(f"connection: ok ({where}, database {settings.database.name!r})")
        if db.engine_state is not None:
            st = db.engine_state
            print(f"engine: pid {st.pid} on {st.address}, data file {st.data_file}, credentials required")
            from mongogate.memory import collection_sizes, size_report

            line, warnings = size_report(
                await collection_sizes(db.memory), settings.database.engine_size_warning
            )
            print(line)
            for w in warnings:
                print(f"WARNING {w}")
        services = build_services(settings, db)  # the server's stores (mongogate/assembly.py)
        await services.memory.ensure_indexes()
        idx = sorted(await services.memory.messages.index_information())
        print(f"indexes: ok (messages: {', '.join(idx)})")
        print(retention_line(settings.memory))
        problems += await _check_long_term(settings, services)
        for spec in specs:
            n = await db.query[spec.collection].estimated_document_count()
            print(f"query tool {spec.name}: collection {spec.collection!r} ({n} documents)")
        problems += await _check_indexes(db, specs)
        await _check_drift(db, specs, sample_size)
        if db.embedded:
            print(
                "query user: the embedded engine enforces no roles; read-only rests on mongogate's own checks"
            )
        else:
            report = await check_query_user(db.query_client)
            if not report.roles_enforced:
                print(f"query user: roles not enforced ({report.detail})")
            else:
                ok = bool(report.read_only) or allow_writable
                print(f"query user: {'ok' if report.read_only else 'PROBLEM'} ({report.detail})")
                problems += 0 if ok else 1
    finally:
        await db.close()
    return 1 if problems else 0


async def _check_long_term(settings: Settings, services: AppState) -> int:
    """Long-term memory: its indexes (created, idempotent), the vector path and the search index.

    A missing search index is a problem only when `vector_search = "atlas"` insists on it."""
    from mongogate.assembly import ensure_memory_indexes
    from mongogate.recall import has_vector_search

    report = await ensure_memory_indexes(services)
    ltm = services.recall
    idx = sorted(await ltm.memories.index_information())
    print(f"long-term memory indexes: ok (memories: {', '.join(idx)})")
    if ltm.legacy:
        print(
            "long-term memory writes: WARNING memories stored by an earlier version keep their uuid "
            "ids: a remember or forget by key that misses by _id falls back to a query that reads "
            "the collection, until none is left (docs/long-term-memory.md, 'Upgrading')"
        )
    else:
        print(
            "long-term memory writes: flat (each memory by its derived _id, quota by counter; "
            "no unique index but _id)"
        )
    signal = ltm.coherence.signal
    if signal is not None and signal.usable():
        print(
            f"long-term memory recall: the engine's write signal ({signal.path}) lets a settled recall "
            "skip its revision read"
        )
    else:
        why = (
            "the database is not reached through a Unix socket"
            if signal is None
            else f"no write signal of this user's at {signal.path} (not a mongogate engine's socket)"
        )
        print(
            f"long-term memory recall: one revision read (by _id) per recall keeps the index coherent ({why})"
        )
    for line in report:
        print(line)
    s = settings.memory.long_term
    if s.vector_search == "atlas" and not await has_vector_search(ltm.memories, s.vector_index_name):
        print(
            f"long-term memory: PROBLEM vector_search = 'atlas' but the search index {s.vector_index_name!r} "
            "is missing: create it (above) or set vector_search = 'auto'"
        )
        return 1
    return 0


async def _check_drift(db: Any, specs: list[QueryToolSpec], sample_size: int) -> None:
    """Sample each query tool's collection once and report stored values of another type than
    declared (a warning: queries return them as null and say so, nothing breaks)."""
    from mongogate.cli.spec import drift_lines
    from mongogate.policy import sample

    samples: dict[str, list[dict[str, Any]]] = {}
    for spec in specs:
        if spec.collection not in samples:
            samples[spec.collection] = await sample(db.query[spec.collection], sample_size)
        docs = samples[spec.collection]
        if not docs:
            continue
        lines, _ = drift_lines(spec, docs)
        for line in lines:
            print(f"WARNING {line}" if "type drift" in line else line)
        if not lines:
            print(f"query tool {spec.name}: types ok in {len(docs)} sampled documents")


async def _check_indexes(db: Any, specs: list[QueryToolSpec]) -> int:
    """Each spec's declared index exists (mongogate creates none); warn for specs without one."""
    from mongogate.policy import index_status

    missing = 0
    for st in await index_status(db.query, specs):
        if st.present is None:
            print(
                f"query tool {st.spec.name}: WARNING no `index` declared: its queries may scan the collection"
            )
        elif st.present:
            print(f"query tool {st.spec.name}: index ok {st.spec.index}")
        else:
            missing += 1
            print(f"query tool {st.spec.name}: PROBLEM index {st.spec.index} is missing; create it with:")
            print(f"  {st.command}")
    return missing


def cmd_check(args: argparse.Namespace) -> int:
    from mongogate.cli.embed import all_specs

    settings = settings_from(args)
    if not 1 <= args.sample <= 10_000:
        raise ConfigError(f"--sample must be from 1 to 10000, got {args.sample}")
    specs = all_specs(settings, args.embed)
    return anyio.run(_check, settings, args.allow_writable_query_user, specs, args.sample)


def cmd_tools(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    from mongogate.cli.audit_format import cell

    tools = registry_for(settings, args.demo).build(settings)
    for t in tools:
        ro = bool(t.annotations and t.annotations.read_only_hint)
        # a description may name fields from the data (tools registered in code): escaped as
        # `audit` escapes its cells, line by line, so nothing in it drives the terminal
        text = "\n".join(cell(line) for line in (t.description or "").split("\n"))
        print(f"## {cell(t.name)}{'  (read-only)' if ro else ''}\n{text}")
        print(json.dumps(t.parameters, indent=2, sort_keys=True))
        print()
    return 0


def register(sub: Any, with_config: Any) -> None:
    c = with_config(sub.add_parser("check", help="check config, connection, indexes and the query user"))
    c.add_argument("--allow-writable-query-user", action="store_true")
    c.add_argument("--embed", action="append", default=[], metavar="MODULE:ATTR", help=EMBED_HELP)
    c.add_argument(
        "--sample", type=int, default=200, metavar="N", help="documents sampled per collection for type drift"
    )
    c.set_defaults(func=cmd_check)

    t = with_config(sub.add_parser("tools", help="list the registered tools with their input schemas"))
    t.add_argument("--demo", action="store_true", help="include the demo tool")
    t.set_defaults(func=cmd_tools)
