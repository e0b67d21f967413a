"""Shared fixtures: the embedded engine starts once per test session on a random port.

Tests talk to it with real pymongo over the wire, exactly as production talks to MongoDB.
With `MONGODB_URI` set they talk to that server instead, and the tests marked
`embedded_engine` (they need the engine's process model: engine processes, data
directories, engine.json) are skipped; `soak` tests run only with `-m soak` (`make soak`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote_plus, urlencode, urlsplit, urlunsplit

import pytest
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import PyMongoError

from mongogate.config import Settings, load_settings
from mongogate.db import EmbeddedEngine
from mongogate.engine.files import ENGINE_LOCK, START_LOCK, STATE_FILE

#: a real MongoDB (or any server not started by the suite) instead of the embedded engine
EXTERNAL_URI = bool(os.environ.get("MONGODB_URI"))
#: modules whose every test is about the engine's process model: marked `embedded_engine` here
ENGINE_MODULES = frozenset(
    {"test_engine.py", "test_engine_processes.py", "test_engine_workers.py", "test_redteam_engine.py"}
)
#: what an engine process leaves in its data directory (an in-thread EmbeddedEngine, which
#: works beside any MONGODB_URI, leaves only its SQLite file)
ENGINE_FILES = (STATE_FILE, ENGINE_LOCK, START_LOCK)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak tests run only when `-m` names them (`make soak`), so `-m 'not install'` or a file
    given by name still runs the small variants only; on MONGODB_URI, engine tests skip."""
    if "soak" not in (config.getoption("markexpr") or ""):
        soak = [item for item in items if item.get_closest_marker("soak") is not None]
        if soak:
            config.hook.pytest_deselected(items=soak)
            items[:] = [item for item in items if item.get_closest_marker("soak") is None]
    for item in items:  # the modules about the engine, and every test given an engine data directory
        if item.path.name in ENGINE_MODULES or "data" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.embedded_engine)
    if not EXTERNAL_URI:
        return
    skip = pytest.mark.skip(
        reason="needs the embedded engine's process model (engine processes, data directories, "
        "engine.json); MONGODB_URI points at another server"
    )
    for item in items:
        if item.get_closest_marker("embedded_engine") is not None:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _engine_use_is_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that starts an engine process in its tmp_path must say so (`embedded_engine`),
    or the run against MONGODB_URI would quietly test the embedded engine instead."""
    marked = request.node.get_closest_marker("embedded_engine") is not None
    tmp: Path | None = None
    if not marked and "tmp_path" in request.fixturenames:
        tmp = request.getfixturevalue("tmp_path")
    yield
    if tmp is not None:
        found = sorted({p.name for name in ENGINE_FILES for p in tmp.rglob(name)})
        if found:
            pytest.fail(
                f"this test started the embedded engine (found {', '.join(found)} under its tmp_path) "
                "but is not marked: add @pytest.mark.embedded_engine, or give its server "
                "database.uri = engine_uri",
                pytrace=False,
            )


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
def _stop_engine_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Engine processes that tests' servers started on demand (they outlive their starters by
    design, until `engine.idle_stop_s`) are stopped when the session ends, not left behind."""
    yield
    from mongogate.engine import client as engine_client

    for state in tmp_path_factory.getbasetemp().rglob(STATE_FILE):
        with contextlib.suppress(Exception):  # teardown: one that will not stop is not a test failure
            engine_client.stop(state.parent, timeout_s=30)


#: on a real MongoDB: a user with only `readAnyDatabase`, the query user of make_settings (a
#: server refuses to start with a query user that can write, as build_server checks)
_READER: dict[str, str] = {}


def _reader_uri(admin_uri: str, name: str, password: str) -> str:
    parts = urlsplit(admin_uri)
    host = parts.netloc.rsplit("@", 1)[-1]
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "authSource"] + [("authSource", "admin")]
    netloc = f"{quote_plus(name)}:{quote_plus(password)}@{host}"
    return urlunsplit((parts.scheme, netloc, "/", urlencode(query), ""))


@contextlib.contextmanager
def _read_only_user(admin_uri: str) -> Iterator[None]:
    """A read-only user for the session's query connections, dropped at the end. A server whose
    user may not create users gets none: servers then refuse to start, and say why."""
    name, password = f"mg_query_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    roles = [{"role": "readAnyDatabase", "db": "admin"}]
    with MongoClient[dict[str, Any]](admin_uri, serverSelectionTimeoutMS=30_000) as admin:
        try:
            admin.admin.command("createUser", name, pwd=password, roles=roles)
        except PyMongoError as e:
            logging.getLogger(__name__).warning("no read-only query user for the tests: %s", e)
            created = False
        else:
            _READER["uri"] = _reader_uri(admin_uri, name, password)
            created = True
        try:
            yield
        finally:
            _READER.clear()
            if created:
                with contextlib.suppress(PyMongoError):
                    admin.admin.command("dropUser", name)


@pytest.fixture(scope="session")
def engine_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A `mongodb://` URI: $MONGODB_URI if set, else the embedded engine on its own thread, on a
    Unix socket with its write signal as `mongogate serve` reaches it (engine/write_signal.py)."""
    if os.environ.get("MONGODB_URI"):
        with _read_only_user(os.environ["MONGODB_URI"]):
            yield os.environ["MONGODB_URI"]
        return
    where = tmp_path_factory.mktemp("engine")
    engine = EmbeddedEngine(where, socket_path=where / "engine.sock")
    uri = engine.start()
    try:
        yield uri
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def _dropper(engine_uri: str) -> Iterator[MongoClient[dict[str, Any]]]:
    with MongoClient[dict[str, Any]](engine_uri, serverSelectionTimeoutMS=30_000) as client:
        yield client


@pytest.fixture
def db_name(_dropper: MongoClient[dict[str, Any]]) -> Iterator[str]:
    """A fresh database per test, so tests never see each other's data, dropped afterwards:
    every operation of the embedded engine slows with the number of databases it holds
    (0.2 s for a seeded server's start with 5, 1.6 s with 300), and a real server is left clean."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with contextlib.suppress(PyMongoError):  # clean-up, not the test's subject
        _dropper.drop_database(name)


@pytest.fixture(scope="module")
def module_db(_dropper: MongoClient[dict[str, Any]]) -> Iterator[str]:
    """An empty database for a module's shared server, for tests whose calls write nothing
    (refused calls): one server start instead of one per test. Dropped at the end of the module."""
    name = f"m_{uuid.uuid4().hex[:12]}"
    yield name
    with contextlib.suppress(PyMongoError):
        _dropper.drop_database(name)


@pytest.fixture(scope="module")
def demo_db(_dropper: MongoClient[dict[str, Any]]) -> Iterator[str]:
    """A database holding the demo orders and their index, seeded once per module, for tests
    that only read: their servers start without seeding (a seeded start costs 3 to 5 times as
    much). Dropped at the end of the module."""
    from mongogate.demo import ORDERS_INDEX, demo_orders

    name = f"demo_{uuid.uuid4().hex[:10]}"
    orders = _dropper[name]["orders"]
    orders.create_index(list(ORDERS_INDEX), name="tenant_created")  # as seed_demo creates it
    orders.insert_many(demo_orders())
    yield name
    with contextlib.suppress(PyMongoError):
        _dropper.drop_database(name)


@pytest.fixture
async def mongo(engine_uri: str) -> AsyncIterator[AsyncMongoClient[dict[str, object]]]:
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(engine_uri, tz_aware=True)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    """A data directory whose engine process (started on demand) is stopped at the end."""
    from mongogate.engine import client as engine_client

    d = tmp_path / "data"
    try:
        yield d
    finally:
        engine_client.stop(d)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every local user may add to, as /tmp is (sticky, 1777)."""
    where = Path(tempfile.mkdtemp(prefix="mongogate-shared-"))
    os.chmod(where, 0o1777)
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


DEV_SECRET = "test-secret-0123456789abcdef-0123456789abcdef"


def make_settings(engine_uri: str, db_name: str, tmp: Path, **overrides: Any) -> Settings:
    """Settings for a server on the shared engine, with its own database and audit file."""
    database = {"uri": engine_uri, "name": db_name}
    if _READER and engine_uri == os.environ.get("MONGODB_URI"):
        database["query_uri"] = _READER["uri"]  # read-only, as production's
    base: dict[str, Any] = {
        "database": database,
        "server": {"data_dir": str(tmp)},
        "auth": {"mode": "none", "tenant": "acme"},
    }
    for section, values in overrides.items():
        if isinstance(values, dict) and isinstance(base.get(section), dict):
            base[section] = {**base[section], **values}
        else:
            base[section] = values
    return load_settings(None, **base)


def jwt_auth() -> dict[str, Any]:
    return {"mode": "jwt", "jwt_secret": DEV_SECRET, "issuer": "mongogate-test", "audience": "mongogate"}


@dataclass(frozen=True)
class CliRun:
    """What a `mongogate ...` run printed and returned (the fields of subprocess.CompletedProcess)."""

    returncode: int
    stdout: str
    stderr: str


Cli = Callable[..., CliRun]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    """`mongogate ARGS` in this process (`mongogate.cli.main`), for tests of arguments, settings
    and their errors where no process boundary is under test: the environment given replaces
    os.environ for the call, the working directory is the checkout, and the root logger that
    `main` configures is put back afterwards."""
    from mongogate.cli import main
    from tests.helpers import ROOT

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    def run(args: Sequence[str], env: Mapping[str, str] | None = None) -> CliRun:
        if _stdio_serve(args):
            return _in_a_process(args, env)
        with monkeypatch.context() as m:
            if env is not None:
                for k in set(os.environ) - set(env):
                    m.delenv(k)
                for k, v in env.items():
                    m.setenv(k, v)
            m.setenv("PYTHONUNBUFFERED", os.environ.get("PYTHONUNBUFFERED", "1"))  # main sets it
            m.chdir(ROOT)
            capsys.readouterr()
            try:
                code = main(list(args))
            except SystemExit as e:  # argparse: --version, --help, usage errors
                code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
            finally:
                root.handlers[:] = handlers
                root.setLevel(level)
            out, err = capsys.readouterr()
        return CliRun(code, out, err)

    yield run


def _stdio_serve(args: Sequence[str]) -> bool:
    """`serve` over stdio answers `initialize` before its database opens and ends the process
    (os._exit) when the open fails: a process boundary, so it never runs inside pytest's process."""
    words = [a for a in args if not a.startswith("-")]
    return bool(words) and words[0] == "serve" and "--http" not in args


def _in_a_process(args: Sequence[str], env: Mapping[str, str] | None) -> CliRun:
    from tests.helpers import EXE, ROOT

    r = subprocess.run(
        [*EXE, *args],
        env=dict(env) if env is not None else None,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return CliRun(r.returncode, r.stdout, r.stderr)
