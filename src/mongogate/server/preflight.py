"""The start-up checks `serve` and `build_server` share: one place decides whether to serve.

Once the database is open and before any tool can run: the database answers, the query user
cannot write (refused on a server that enforces roles), and every query tool's declared index
exists (mongogate never creates an operator's index: the message says how). `build_server`
runs them in its lifespan by default, after the registry's start-up hooks (which may create
indexes); `serve --http` runs them before the port is served (cli/serve.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from mongogate.errors import ConfigError

if TYPE_CHECKING:
    from mongogate.config import Settings
    from mongogate.db import Database
    from mongogate.specs import QueryToolSpec

log = logging.getLogger(__name__)

#: how a message names the override of a refusal: (what was given, how to give it)
_OVERRIDES = {
    "api": {
        "indexes": (
            "allow_missing_indexes=True",
            "pass checks=StartupChecks(allow_missing_indexes=True) to build_server",
        ),
        "writable": (
            "allow_writable_query_user=True",
            "pass checks=StartupChecks(allow_writable_query_user=True) to build_server",
        ),
    },
    "cli": {
        "indexes": ("--allow-missing-indexes", "pass --allow-missing-indexes"),
        "writable": ("--allow-writable-query-user", "pass --allow-writable-query-user"),
    },
}


@dataclass(frozen=True)
class StartupChecks:
    """What `build_server` checks before serving (the same as `serve`). A refusal is a
    ConfigError naming what is wrong and how to fix it; each ``allow_*`` serves anyway with a
    WARNING instead (as `serve --allow-missing-indexes` / `--allow-writable-query-user`)."""

    allow_missing_indexes: bool = False
    allow_writable_query_user: bool = False
    #: whose words a refusal uses for the override: build_server's or serve's flags
    hints: Literal["api", "cli"] = "api"


async def check_connection(db: Database, settings: Settings, checks: StartupChecks) -> None:
    """On an open database: it answers, and the query user cannot write."""
    from mongogate.privileges import check_query_user

    await db.ping()  # unreachable: one line with the hosts, the key and the timeout used
    if settings.database.uri is None:
        return  # the embedded engine: Database.open() says plainly that it enforces no roles
    report = await check_query_user(db.query_client)
    if report.read_only:
        log.info("%s", report.detail)
        return
    if not report.roles_enforced:
        log.warning("%s", report.detail)
        return
    given, how = _OVERRIDES[checks.hints]["writable"]
    if checks.allow_writable_query_user:
        log.warning("!!! %s; serving anyway because %s was given !!!", report.detail, given)
        return
    raise ConfigError(
        f"{report.detail}. Give database.query_uri a user with only the 'read' role, "
        f"or {how} to accept the risk"
    )


async def check_indexes(db: Database, specs: Iterable[QueryToolSpec], checks: StartupChecks) -> None:
    """Refuse to serve while a query tool's declared index is missing."""
    from mongogate.policy import index_status, missing_report

    declared = [s for s in specs if s.index]
    if not declared:
        return
    report = missing_report(await index_status(db.query, declared))
    if report is None:
        return
    given, how = _OVERRIDES[checks.hints]["indexes"]
    if checks.allow_missing_indexes:
        log.warning("!!! %s\nserving anyway because %s was given !!!", report, given)
        return
    raise ConfigError(f"{report}\n(or {how} to serve without them)")


async def run_startup_checks(
    db: Database, settings: Settings, specs: Iterable[QueryToolSpec], checks: StartupChecks
) -> None:
    """All of them, in the order `build_server` runs them (connection, then indexes)."""
    await check_connection(db, settings, checks)
    await check_indexes(db, specs, checks)
