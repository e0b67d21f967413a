"""Is the query user read-only? Asked of the server itself (`connectionStatus` with privileges)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

#: any of these on any resource means the user can change data
WRITE_ACTIONS = frozenset(
    {
        "insert", "update", "remove", "createCollection", "dropCollection", "createIndex", "dropIndex",
        "dropDatabase", "renameCollectionSameDB", "convertToCapped", "collMod", "bypassDocumentValidation",
        "anyAction", "internal", "applyOps", "createUser", "grantRole", "dropUser", "compact", "emptycapped",
    }
)  # fmt: skip


@dataclass(frozen=True)
class PrivilegeReport:
    read_only: bool | None  # None: could not be determined
    detail: str
    write_actions: tuple[str, ...] = ()
    roles_enforced: bool = True


NO_ROLES = (
    "the server is the mongoeco engine, which enforces no roles: the read-only guarantee rests on "
    "mongogate's own checks (query tools only ever call find)"
)


async def check_query_user(client: AsyncMongoClient[Any]) -> PrivilegeReport:
    try:
        info = await client.admin.command("buildInfo")
        if info.get("gitVersion") == "mongoeco":
            return PrivilegeReport(None, NO_ROLES, roles_enforced=False)
        status = await client.admin.command({"connectionStatus": 1, "showPrivileges": True})
    except PyMongoError as e:
        brief = str(e).split(", Timeout:")[0][:300]  # never pymongo's topology dump
        return PrivilegeReport(None, f"could not read the query user's privileges: {brief}")
    auth = status.get("authInfo", {})
    users = auth.get("authenticatedUsers", [])
    privileges = auth.get("authenticatedUserPrivileges")
    if not users:
        return PrivilegeReport(
            False, "the query connection is not authenticated, so nothing limits its writes"
        )
    if privileges is None:
        return PrivilegeReport(None, "the server did not report the query user's privileges")
    found = sorted({a for p in privileges for a in p.get("actions", []) if a in WRITE_ACTIONS})
    who = ", ".join(f"{u.get('user')}@{u.get('db')}" for u in users)
    if found:
        return PrivilegeReport(False, f"query user {who} can write ({', '.join(found[:8])})", tuple(found))
    return PrivilegeReport(True, f"query user {who} is read-only")
