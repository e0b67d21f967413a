"""`mongogate serve`: stdio by default, Streamable HTTP with `--http`.

Nothing here prints to stdout while a stdio server runs: stdout carries the protocol.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Literal

import anyio

from mongogate.cli.common import registry_for, settings_from
from mongogate.config import Settings
from mongogate.errors import MongogateError

log = logging.getLogger("mongogate")


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
    if args.stateless:
        overrides.setdefault("server", {})["stateless"] = True
    settings = settings_from(args, **overrides)
    transport: Literal["stdio", "http"] = "http" if args.http else "stdio"
    if args.http and args.insecure_no_auth:
        from mongogate.server.http import is_loopback

        if not is_loopback(settings.server.host):
            raise MongogateError("--insecure-no-auth is allowed on a loopback address only (e.g. 127.0.0.1)")
        settings = settings.model_copy(update={"auth": settings.auth.model_copy(update={"mode": "none"})})
    anyio.run(_privileges, settings, args.allow_writable_query_user)
    server = build_server(
        settings,
        registry_for(settings, args.demo),
        transport=transport,
        insecure_no_auth=args.insecure_no_auth,
    )
    if transport == "stdio":
        return _serve_stdio(server)
    from mongogate.server.app import public_url
    from mongogate.server.http import serve_http

    _banner(settings, public_url(settings) + "/mcp", args.demo)
    serve_http(server, settings.server.host, settings.server.port, settings.server)
    return 0


def register(sub: Any, with_config: Any) -> None:
    s = with_config(sub.add_parser("serve", help="run the MCP server (stdio by default)"))
    s.add_argument("--http", action="store_true", help="serve Streamable HTTP instead of stdio")
    s.add_argument("--host", help="HTTP bind address (default 127.0.0.1)")
    s.add_argument("--port", type=int, help="HTTP port (default 8000)")
    s.add_argument("--demo", action="store_true", help="seed demo orders and register find_orders")
    s.add_argument("--allow-writable-query-user", action="store_true")
    s.add_argument("--insecure-no-auth", action="store_true", help="HTTP without auth (loopback only)")
    s.add_argument(
        "--stateless", action="store_true", help="HTTP without MCP sessions, for a round-robin load balancer"
    )
    s.set_defaults(func=cmd_serve)
