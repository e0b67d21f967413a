"""`mongogate serve | check | tools | audit | token | worker`.

Nothing here prints to stdout while a stdio server runs: stdout carries the protocol.
Human-facing output of the other commands goes to stdout; logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio

from mongogate.config import Settings, load_settings
from mongogate.errors import MongogateError

if TYPE_CHECKING:
    from mongogate.tools.registry import ToolRegistry

log = logging.getLogger("mongogate")


def _settings(args: argparse.Namespace, **overrides: Any) -> Settings:
    return load_settings(getattr(args, "config", None), **overrides)


def _registry(settings: Settings, demo: bool) -> ToolRegistry:
    from mongogate.tools.registry import ToolRegistry  # late: keeps `audit` and `token` quick

    registry = ToolRegistry.from_settings(settings)
    if demo:
        from mongogate.demo import FIND_ORDERS, seed_demo

        if "find_orders" not in {s.name for s in registry.query_specs}:
            registry.add_query_tool(FIND_ORDERS)
        registry.on_startup(seed_demo)
    return registry


async def _privileges(settings: Settings, allow_writable: bool) -> None:
    """Refuse a query user that can write (real MongoDB), or say plainly that the engine has no roles."""
    from mongogate.db import Database
    from mongogate.privileges import check_query_user

    if settings.database.uri is None:
        return  # the embedded engine: Database.open() says plainly that it enforces no roles
    db = Database(settings.database, settings.server.data_dir)
    await db.open()
    try:
        report = await check_query_user(db.query_client)
    finally:
        await db.close()
    if report.read_only:
        log.info("%s", report.detail)
        return
    if not report.roles_enforced:
        log.warning("%s", report.detail)
        return
    if allow_writable:
        log.warning("!!! %s; serving anyway because --allow-writable-query-user was given !!!", report.detail)
        return
    raise MongogateError(
        f"{report.detail}. Give database.query_uri a user with only the 'read' role, "
        "or pass --allow-writable-query-user to accept the risk"
    )


def _banner(settings: Settings, url: str, demo: bool) -> None:
    lines = [f"mongogate serving MCP over Streamable HTTP at {url}"]
    if demo and settings.auth.mode == "jwt" and settings.auth.jwt_secret is not None:
        # Only `--demo` (what `make run` starts) prints a token: a real server never mints one.
        from mongogate.server.tokens import mint_dev_token

        token = mint_dev_token(settings.auth, tenant="acme", ttl_s=8 * 3600, subject="dev")
        lines += [
            "development token for tenant 'acme' (8 h):",
            f"  export MONGOGATE_TOKEN={token}",
            "try a whole turn and a query:",
            f"  .venv/bin/python examples/http_client.py --url {url}",
        ]
    elif settings.auth.mode == "jwt":
        lines.append("clients need a bearer token from your identity provider (tenant claim required)")
    elif settings.auth.mode == "none":
        lines.append(
            f"no authentication (--insecure-no-auth): every call acts as tenant {settings.auth.tenant!r}"
        )
    if demo:
        lines.append("demo data: tenants acme, globex, initech; tool find_orders")
    print("\n".join(lines), file=sys.stderr, flush=True)


def _client_went_away(exc: BaseException) -> bool:
    """True when every leaf of `exc` says the stdio peer closed its pipes."""
    import anyio

    gone = (BrokenPipeError, ConnectionResetError, anyio.BrokenResourceError, anyio.ClosedResourceError)
    if isinstance(exc, BaseExceptionGroup):
        return all(_client_went_away(e) for e in exc.exceptions)
    return isinstance(exc, gone)


def _serve_stdio(server: Any) -> int:
    """A client that vanishes (its process died) is a normal shutdown: status 0, one INFO line.

    The lifespan has closed the database (and released the data directory) by the time
    `run` returns or raises; in-flight turns keep their leases, which a retry of the same
    turn takes over at once.
    """
    try:
        server.run("stdio")
    except BaseException as e:
        if not _client_went_away(e):
            raise
        log.info("stdio client went away; shutting down")
        sys.stderr.flush()
        # stdout is a broken pipe: the interpreter's final flush of it would print a traceback.
        os._exit(0)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from mongogate.server.app import build_server

    overrides: dict[str, Any] = {}
    if args.host or args.port is not None:
        overrides["server"] = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = _settings(args, **overrides)
    transport: Literal["stdio", "http"] = "http" if args.http else "stdio"
    if args.http and args.insecure_no_auth:
        from mongogate.server.http import is_loopback

        if not is_loopback(settings.server.host):
            raise MongogateError("--insecure-no-auth is allowed on a loopback address only (e.g. 127.0.0.1)")
        settings = settings.model_copy(update={"auth": settings.auth.model_copy(update={"mode": "none"})})
    anyio.run(_privileges, settings, args.allow_writable_query_user)
    server = build_server(
        settings, _registry(settings, args.demo), transport=transport, insecure_no_auth=args.insecure_no_auth
    )
    if transport == "stdio":
        return _serve_stdio(server)
    from mongogate.server.app import public_url
    from mongogate.server.http import serve_http

    _banner(settings, public_url(settings) + "/mcp", args.demo)
    serve_http(server, settings.server.host, settings.server.port, settings.server)
    return 0


async def _check(settings: Settings, allow_writable: bool) -> int:
    from mongogate.db import Database
    from mongogate.memory.store import MemoryStore
    from mongogate.privileges import check_query_user

    problems = 0
    print(f"config: ok ({len(settings.query_tools)} query tool(s), auth mode {settings.auth.mode})")
    db = Database(settings.database, settings.server.data_dir)
    await db.open()
    try:
        await db.ping()
        where = "embedded engine in " + str(settings.server.data_dir) if db.embedded else "database.uri"
        print(f"connection: ok ({where}, database {settings.database.name!r})")
        store = MemoryStore(db.memory, settings.memory)
        await store.ensure_indexes()
        idx = sorted(await store.messages.index_information())
        print(f"indexes: ok (messages: {', '.join(idx)})")
        for spec in settings.query_tools:
            n = await db.query[spec.collection].estimated_document_count()
            print(f"query tool {spec.name}: collection {spec.collection!r} ({n} documents)")
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


def cmd_check(args: argparse.Namespace) -> int:
    settings = _settings(args)
    return anyio.run(_check, settings, args.allow_writable_query_user)


def cmd_tools(args: argparse.Namespace) -> int:
    settings = _settings(args)
    tools = _registry(settings, args.demo).build(settings)
    for t in tools:
        ro = bool(t.annotations and t.annotations.read_only_hint)
        print(f"## {t.name}{'  (read-only)' if ro else ''}\n{t.description}")
        print(json.dumps(t.parameters, indent=2, sort_keys=True))
        print()
    return 0


def _since(text: str | None) -> datetime | None:
    if not text:
        return None
    from mongogate.server.tokens import parse_ttl

    try:
        return datetime.now(UTC) - timedelta(seconds=parse_ttl(text))
    except ValueError:
        pass
    try:
        ts = datetime.fromisoformat(text)
    except ValueError as e:
        raise MongogateError(f"--since {text!r}: give an ISO 8601 time or a duration like 1h, 30m, 2d") from e
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def cmd_audit(args: argparse.Namespace) -> int:
    from mongogate.policy.audit import follow, read_events, summarize

    settings = _settings(args)
    path = Path(args.path) if args.path else settings.audit_path
    filters = {"since": _since(args.since), "tenant": args.tenant, "tool": args.tool, "reason": args.reason}
    if args.follow:
        try:
            for event in follow(path, **filters):
                print(json.dumps(event), flush=True)
        except KeyboardInterrupt:
            return 0
        return 0
    events = list(read_events(path, **filters))
    for event in events:
        print(json.dumps(event))
    s = summarize(events)
    print(f"\n{s['rejected']} rejected filter(s), {s['queries']} query event(s) in {path}")
    for title, key in (("by reason", "by_reason"), ("by tool", "by_tool")):
        if s[key]:
            print(f"  {title}: " + ", ".join(f"{k} {v}" for k, v in s[key].items()))
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    from mongogate.server.tokens import mint_dev_token, parse_ttl

    settings = _settings(args)
    try:
        ttl = parse_ttl(args.ttl)
        token = mint_dev_token(
            settings.auth, tenant=args.tenant, ttl_s=ttl, subject=args.subject, scopes=args.scope
        )
    except ValueError as e:
        raise MongogateError(str(e)) from e
    print(token)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mongogate", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO on stderr")
    sub = p.add_subparsers(dest="command", required=True)

    def with_config(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument(
            "--config", help="TOML config file (default: $MONGOGATE_CONFIG, else built-in defaults)"
        )
        return sp

    s = with_config(sub.add_parser("serve", help="run the MCP server (stdio by default)"))
    s.add_argument("--http", action="store_true", help="serve Streamable HTTP instead of stdio")
    s.add_argument("--host", help="HTTP bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="HTTP port (default 8000)")
    s.add_argument("--demo", action="store_true", help="seed demo orders and register find_orders")
    s.add_argument("--allow-writable-query-user", action="store_true")
    s.add_argument("--insecure-no-auth", action="store_true", help="HTTP without auth (loopback only)")
    s.set_defaults(func=cmd_serve)

    c = with_config(sub.add_parser("check", help="check config, connection, indexes and the query user"))
    c.add_argument("--allow-writable-query-user", action="store_true")
    c.set_defaults(func=cmd_check)

    t = with_config(sub.add_parser("tools", help="list the registered tools with their input schemas"))
    t.add_argument("--demo", action="store_true", help="include the demo tool")
    t.set_defaults(func=cmd_tools)

    a = with_config(sub.add_parser("audit", help="show rejected filters from the audit log"))
    a.add_argument("--since", help="ISO 8601 time or a duration (1h, 30m, 2d)")
    a.add_argument("--tenant")
    a.add_argument("--tool")
    a.add_argument("--reason")
    a.add_argument("--path", help="audit log file (default: audit.path or <data dir>/audit.jsonl)")
    a.add_argument("--follow", action="store_true", help="keep printing new events")
    a.set_defaults(func=cmd_audit)

    k = with_config(sub.add_parser("token", help="mint a development JWT (HS256 secret from the config)"))
    k.add_argument("--tenant", required=True)
    k.add_argument("--ttl", default="1h")
    k.add_argument("--subject", default="dev")
    k.add_argument("--scope", action="append", default=[])
    k.set_defaults(func=cmd_token)

    from mongogate.scheduler.worker import add_worker_parser

    add_worker_parser(with_config(sub.add_parser("worker", help="run scheduled agents")))
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(
        level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        return int(args.func(args))
    except MongogateError as e:
        print(f"mongogate: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
