"""Read-only for real: the query user's privileges, asked of the server.

Role enforcement exists only on a real MongoDB: those tests run when MONGODB_URI points at one
whose user may create users (e.g. a local mongod), and are skipped with that reason otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus, urlsplit, urlunsplit

import pytest
from pymongo import AsyncMongoClient

from mongogate.privileges import check_query_user

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parent.parent
REAL = os.environ.get("MONGODB_URI")
needs_real = pytest.mark.skipif(
    not REAL,
    reason="needs a real MongoDB with role enforcement: set MONGODB_URI (the embedded engine has no roles)",
)


async def test_embedded_engine_is_reported_as_enforcing_no_roles(engine_uri: str) -> None:
    if REAL:
        pytest.skip("MONGODB_URI is a real server")
    async with AsyncMongoClient[dict[str, Any]](engine_uri) as c:
        report = await check_query_user(c)
    assert report.roles_enforced is False and "enforces no roles" in report.detail


@pytest.fixture
async def reader_uri() -> AsyncIterator[tuple[str, str]]:
    assert REAL
    name = f"mg_reader_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    db = "mongogate_roles"
    async with AsyncMongoClient[dict[str, Any]](REAL) as admin:
        await admin[db].command("createUser", name, pwd=password, roles=[{"role": "read", "db": db}])
        parts = urlsplit(REAL)
        host = parts.netloc.rsplit("@", 1)[-1]
        netloc = f"{quote_plus(name)}:{quote_plus(password)}@{host}"
        uri = urlunsplit((parts.scheme, netloc, "/" + db, f"authSource={db}", ""))
        try:
            yield uri, db
        finally:
            await admin[db].command("dropUser", name)


@pytest.mark.real_mongodb
@needs_real
async def test_read_role_user_is_read_only_and_admin_is_not(reader_uri: tuple[str, str]) -> None:
    uri, _ = reader_uri
    async with AsyncMongoClient[dict[str, Any]](uri) as c:
        assert (await check_query_user(c)).read_only is True
    async with AsyncMongoClient[dict[str, Any]](REAL) as c:
        report = await check_query_user(c)
    assert report.read_only is False and report.roles_enforced


@pytest.mark.real_mongodb
@needs_real
def test_serve_refuses_a_writable_query_user(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    env |= {"MONGOGATE_DATABASE__URI": REAL or "", "MONGOGATE_AUTH__TENANT": "acme"}
    env["MONGOGATE_SERVER__DATA_DIR"] = str(tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "mongogate.cli", "check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 1 and "PROBLEM" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "mongogate.cli", "check", "--allow-writable-query-user"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 0
