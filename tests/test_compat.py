"""Each library internal mongogate leans on (mongogate/compat/), pinned to the installed version.

When one of these fails after an upgrade, read the library's new source, adapt the one wrapper in
compat/, and move the pin: nothing else of mongogate touches these names.
"""

from __future__ import annotations

import inspect
import os
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from bson import Int64, ObjectId
from mcp import Client
from mcp.server.mcpserver import MCPServer
from pymongo import MongoClient
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from mongogate.compat import WRAPPED, mongoeco, sdk, settings
from mongogate.compat.uvicorn import H11Protocol
from mongogate.config import load_settings

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize("package", sorted(WRAPPED))
def test_pins_are_the_installed_versions(package: str) -> None:
    """The versions the wrappers below were read against; a new one means re-reading them."""
    wrapper, read_against = WRAPPED[package]
    assert version(package).startswith(read_against), (
        f"{package} {version(package)} is installed, but src/mongogate/compat/{wrapper} was read "
        f"against {read_against}*: re-read that wrapper against the new source, then move its "
        "entry in mongogate.compat.WRAPPED"
    )


def test_sdk_func_metadata_takes_the_models_and_schema_of_a_spec_tool() -> None:
    class Args(sdk.ArgModelBase):
        x: int = 0

    meta = sdk.tool_metadata(Args, None, {"type": "object"})
    assert meta.arg_model is Args and meta.output_schema == {"type": "object"}


def test_sdk_output_schema_derived_once_is_the_sdks_own_and_each_tool_gets_its_copy() -> None:
    """The SDK derives a tool's output schema from its model; mongogate derives it once per model
    (a server's build time), so it must equal the SDK's derivation, and one tool editing its
    schema must not change the next tool's."""
    from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
    from pydantic import BaseModel

    class Out(BaseModel):
        n: int
        names: list[str]

    class Args(sdk.ArgModelBase):
        pass

    sdks = FuncMetadata(arg_model=Args, output_model=Out).output_schema
    first = sdk.tool_metadata(Args, Out, None)
    assert first.output_schema == sdks and first.output_model is Out
    assert first.output_schema is not None
    first.output_schema["properties"]["n"]["type"] = "string"
    assert sdk.tool_metadata(Args, Out, None).output_schema == sdks


async def test_sdk_handler_table_advertises_what_is_registered() -> None:
    server: MCPServer[Any] = MCPServer("pin")

    @server.prompt()
    def hello() -> str:
        return "hi"

    table = server._lowlevel_server._request_handlers
    assert "prompts/list" in table and "prompts/get" in table
    async with Client(server) as client:
        assert client.server_capabilities.prompts is not None
    sdk.drop_request_handlers(server, ["prompts/list", "prompts/get"])
    async with Client(server) as client:
        assert client.server_capabilities.prompts is None  # dropped = not advertised


def test_uvicorn_h11_protocol_has_what_the_guarded_subclass_extends() -> None:
    for name in ("connection_made", "data_received", "handle_events", "connection_lost"):
        assert callable(getattr(H11Protocol, name)), name
    source = inspect.getsource(H11Protocol)
    for attribute in ("self.cycle", "self.headers", "self.config", "self.loop", "self.transport"):
        assert attribute in source, attribute


def test_mongoeco_counts_open_connections(tmp_path: Path) -> None:
    from mongogate.db import EmbeddedEngine

    engine = EmbeddedEngine(tmp_path)
    uri = engine.start()
    try:
        assert mongoeco.open_connections(engine._server) == 0
        client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=5000)
        client.admin.command("ping")
        assert mongoeco.open_connections(engine._server) >= 1
        client.close()
    finally:
        engine.stop()


def test_pydantic_settings_read_file_sees_the_path_and_the_data(tmp_path: Path) -> None:
    from pydantic_settings import TomlConfigSettingsSource

    assert callable(TomlConfigSettingsSource._read_file)  # the method PostReadToml extends
    assert issubclass(settings.PostReadToml, TomlConfigSettingsSource)
    (tmp_path / "conf").mkdir()
    file = tmp_path / "conf" / "mongogate.toml"
    file.write_text('[server]\ndata_dir = "data"\n[auth]\ntenant = "acme"\n')
    loaded = load_settings(file)
    assert loaded.server.data_dir == tmp_path / "conf" / "data"  # relative to the file, via after_read


def test_uvicorn_close_header_is_connection_close() -> None:
    from mongogate.compat.uvicorn import CLOSE_HEADER

    assert CLOSE_HEADER == (b"connection", b"close")


async def test_sdk_session_manager_has_the_hooks_and_tables_the_session_cap_uses() -> None:
    """server/session_cap.py wraps the manager's admission and discard and evicts through its
    two tables: each must exist, be looked up on the instance at call time, and hold sessions."""
    import anyio
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    server: MCPServer[Any] = MCPServer("pin")
    manager = server.streamable_http_app() and server.session_manager
    assert isinstance(manager, StreamableHTTPSessionManager)
    admit, discard = sdk.session_hooks(manager)
    assert callable(admit) and callable(discard)
    assert inspect.iscoroutinefunction(discard) and not inspect.iscoroutinefunction(admit)
    source = inspect.getsource(StreamableHTTPSessionManager)
    for call in ("self._admit_session(", "self._discard_session("):
        assert call in source, call  # looked up on self: an instance attribute replaces it
    seen: list[str] = []

    def counting_admit(requestor: Any) -> Any:
        transport = admit(requestor)
        seen.append(transport.mcp_session_id)
        return transport

    sdk.set_session_hooks(manager, counting_admit, discard)
    assert sdk.session_task_group(manager) is None  # before run
    async with manager.run():
        assert sdk.session_task_group(manager) is not None
        transport = counting_admit(None)
        sid = transport.mcp_session_id
        assert sdk.forget_session(manager, sid) is transport
        assert sdk.forget_session(manager, sid) is None
        await anyio.sleep(0)
    assert seen == [sid]


def test_mongoeco_proxy_has_the_lifecycle_the_unix_server_reuses() -> None:
    from mongoeco.wire import AsyncMongoEcoProxyServer
    from mongoeco.wire._lifecycle import finish_cleanup

    assert callable(finish_cleanup)
    for name in ("_accept_connection", "_update_diagnostic_resources", "_close_resources", "start"):
        assert callable(getattr(AsyncMongoEcoProxyServer, name)), name
    source = inspect.getsource(AsyncMongoEcoProxyServer)
    for attribute in (
        "self._lifecycle_lock",
        "self._server",
        "self._owns_client",
        "self._engine_connected",
        "self._client._engine",
        "self._diagnostics",
        "self._connections",
    ):
        assert attribute in source, attribute


def test_mongoeco_serves_on_a_unix_socket(tmp_path: Path) -> None:
    from mongogate.db import EmbeddedEngine

    engine = EmbeddedEngine(tmp_path, socket_path=tmp_path / "e.sock")
    uri = engine.start()
    try:
        assert (tmp_path / "e.sock").stat().st_mode & 0o777 == 0o600
        client: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=5000)
        assert client.admin.command("ping")["ok"] == 1
        assert engine.connections() >= 1
        client.close()
    finally:
        engine.stop()


def test_no_private_module_or_name_of_a_library_outside_compat() -> None:
    """What ruff's SLF001 cannot see: ``from lib._private import x`` and ``getattr``/``setattr``
    with a private name. Outside compat/ neither may reach another library (issue 30: engine/unix.py
    imported ``mongoeco.wire._lifecycle``, session_cap.py set ``_admit_session`` by ``setattr``)."""
    import ast

    import mongogate

    root = Path(mongogate.__file__).parent
    found: list[str] = []
    for file in sorted(root.rglob("*.py")):
        if file.parent.name == "compat":
            continue
        for node in ast.walk(ast.parse(file.read_text(), str(file))):
            modules: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            for module in modules:
                if not module.startswith(("mongogate", "__future__")) and any(
                    p.startswith("_") for p in module.split(".")
                ):
                    found.append(f"{file.relative_to(root)}:{getattr(node, 'lineno', 0)} imports {module}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(name := node.args[1].value, str)
                and name.startswith("_")
                and not (isinstance(node.args[0], ast.Name) and node.args[0].id in ("self", "cls"))
            ):
                found.append(f"{file.relative_to(root)}:{node.lineno} {node.func.id} {name}")
    assert found == []


def test_mongoeco_unique_check_takes_the_arguments_the_flat_insert_engine_overrides() -> None:
    """FlatInsertEngine overrides this private method and flips one keyword: the names must stay."""
    from mongoeco.engines.sqlite import SQLiteEngine

    params = inspect.signature(getattr(SQLiteEngine, mongoeco.UNIQUE_CHECK)).parameters
    assert list(params)[:4] == ["self", "db_name", "coll_name", "document"]
    for name in ("exclude_storage_key", "skip_id_check", "scan_payload_id"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name


@pytest.mark.skipif(bool(os.environ.get("MONGODB_URI")), reason="the embedded engine's shim")
@pytest.mark.parametrize(
    ("first", "again"),
    [
        ("a-string-id", "a-string-id"),
        (ObjectId("6b0f6250940860c3b9c317a8"), ObjectId("6b0f6250940860c3b9c317a8")),
        (1, 1.0),  # numeric ids keep the engine's scan: one _id by BSON equality
        (Int64(7), 7),
        ({"a": 1}, {"a": 1.0}),
    ],
)
def test_the_flat_insert_engine_still_refuses_every_duplicate_id(
    engine_uri: str, db_name: str, first: object, again: object
) -> None:
    """Skipping the payload scan for string and ObjectId ids loses no duplicate (E11000)."""
    with MongoClient[dict[str, Any]](engine_uri) as client:
        coll = client[db_name]["c"]
        coll.insert_many([{"_id": f"filler-{i}"} for i in range(20)])
        coll.insert_one({"_id": first, "n": 1})
        with pytest.raises(DuplicateKeyError):
            coll.insert_one({"_id": again, "n": 2})
        with pytest.raises(BulkWriteError):
            coll.insert_many([{"_id": again, "n": 3}])
        assert coll.count_documents({"n": {"$gt": 1}}) == 0


@pytest.mark.skipif(bool(os.environ.get("MONGODB_URI")), reason="the embedded engine's shim")
def test_an_insert_by_string_id_reads_no_stored_document(
    engine_uri: str, db_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What makes inserts flat: a string `_id` insert decodes none of the collection's documents
    (mongoeco's scan reads them all through `_load_documents`); a numeric one still does."""
    from mongoeco.engines.sqlite import SQLiteEngine

    loads: list[str] = []
    original = SQLiteEngine._load_documents

    def counting(self: Any, db: str, coll: str, *args: Any, **kwargs: Any) -> Any:
        if db == db_name:
            loads.append(coll)
        return original(self, db, coll, *args, **kwargs)

    with MongoClient[dict[str, Any]](engine_uri) as client:
        coll = client[db_name]["c"]
        coll.insert_many([{"_id": f"filler-{i}"} for i in range(20)])
        monkeypatch.setattr(SQLiteEngine, "_load_documents", counting)
        coll.insert_one({"_id": "fresh"})
        coll.insert_many([{"_id": ObjectId()}, {"_id": "fresh-2"}])
        assert loads == []
        coll.insert_one({"_id": 42})
        assert loads == ["c"]


def test_mongoeco_find_semantics_has_the_fields_the_fast_id_engine_reads() -> None:
    """FastIdEngine decides from these fields of mongoeco's find semantics, then calls
    `get_document` with these keywords: the names must stay."""
    from dataclasses import fields

    from mongoeco.engines.semantic_core import EngineFindSemantics
    from mongoeco.engines.sqlite import SQLiteEngine

    names = {f.name for f in fields(EngineFindSemantics)}
    wanted = {"filter_spec", "limit", "skip", "sort", "hint", "collation", "text_query", "max_time_ms"}
    assert wanted | {"projection", "dialect", "operation_context"} <= names
    params = inspect.signature(SQLiteEngine.get_document).parameters
    assert list(params)[:4] == ["self", "db_name", "coll_name", "doc_id"]
    for name in ("projection", "dialect", "operation_context"):
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
    assert "context" in inspect.signature(SQLiteEngine.scan_find_semantics).parameters
    assert "operation_context" in inspect.signature(SQLiteEngine._get_document_sync).parameters
    recorded = inspect.signature(SQLiteEngine._record_operation_metadata).parameters
    assert {"operation", "comment", "max_time_ms", "hint"} <= set(recorded)


PROJECTIONS: list[dict[str, Any] | None] = [
    None,
    {"rev": 1, "pending": 1, "changes": {"$slice": -2}},
    {"changes": 0},
    {"_id": 0, "rev": 1},
    {"changes.$": 1},  # positional: reads the filter, the original path
    {"changes": {"$elemMatch": {"$eq": "c"}}},
]


@pytest.mark.skipif(bool(os.environ.get("MONGODB_URI")), reason="the embedded engine's shim")
@pytest.mark.parametrize("projection", PROJECTIONS)
@pytest.mark.parametrize(
    "doc_id", ["scope-1", ObjectId("6b0f6250940860c3b9c317a8"), 1, Int64(2), 3.0, {"a": 1}, "absent"]
)
def test_a_find_by_id_answers_as_the_engines_own_scan(
    engine_uri: str, db_name: str, doc_id: object, projection: dict[str, Any] | None
) -> None:
    """The primary-key read gives what mongoeco's scan gives (`{_id: {$eq: id}}` takes the scan):
    found, not found, each projection, numeric and compound ids."""
    with MongoClient[dict[str, Any]](engine_uri) as client:
        coll = client[db_name]["c"]
        stored: list[object] = ["scope-1", ObjectId("6b0f6250940860c3b9c317a8"), 1, 2, 3, {"a": 1}]
        coll.insert_many(
            [
                {"_id": i, "rev": n, "pending": {"t": n}, "changes": ["a", "b", "c"]}
                for n, i in enumerate(stored)
            ]
        )
        fast = answer(coll, {"_id": doc_id}, projection)
        scanned = answer(coll, {"_id": {"$eq": doc_id}}, projection)
        assert fast == scanned
        assert (fast is None) == (doc_id == "absent")


def answer(coll: Any, query: dict[str, Any], projection: dict[str, Any] | None) -> object:
    """The document found, or the error's code (a positional projection by `_id` alone is refused)."""
    try:
        return coll.find_one(query, projection)
    except OperationFailure as e:
        return ("refused", e.code)


@pytest.mark.skipif(bool(os.environ.get("MONGODB_URI")), reason="the embedded engine's shim")
def test_only_a_plain_find_of_one_string_or_object_id_takes_the_primary_key_read(
    engine_uri: str, db_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the fast path covers: one document by a string or ObjectId `_id` with a plain
    projection; a numeric id, a second condition, a positional projection, a session, a sort or
    a time limit take the scan."""
    taken: list[object] = []
    original = mongoeco.FastIdEngine._one

    def counting(self: Any, db: str, coll: str, doc_id: object, semantics: Any, context: Any) -> Any:
        if db == db_name:
            taken.append(doc_id)
        return original(self, db, coll, doc_id, semantics, context)

    oid = ObjectId("6b0f6250940860c3b9c317a8")
    with MongoClient[dict[str, Any]](engine_uri) as client:
        coll = client[db_name]["c"]
        coll.insert_many([{"_id": "s", "n": 1}, {"_id": oid, "n": 2}, {"_id": 7, "n": 3}])
        monkeypatch.setattr(mongoeco.FastIdEngine, "_one", counting)
        assert coll.find_one({"_id": "s"}, {"n": 1}) == {"_id": "s", "n": 1}
        assert coll.find_one({"_id": oid}) == {"_id": oid, "n": 2}
        assert coll.find_one({"_id": "nope"}) is None
        assert taken == ["s", oid, "nope"]
        assert coll.find_one({"_id": 7}) == {"_id": 7, "n": 3}
        assert coll.find_one({"_id": "s", "n": 2}) is None
        assert answer(coll, {"_id": "s"}, {"n.$": 1}) == answer(coll, {"_id": {"$eq": "s"}}, {"n.$": 1})
        assert coll.find_one({"_id": "s"}, sort=[("n", 1)]) == {"_id": "s", "n": 1}
        assert coll.find_one({"_id": "s"}, max_time_ms=1000) == {"_id": "s", "n": 1}
        assert list(coll.find({"_id": "s"})) == [{"_id": "s", "n": 1}]
        assert taken == ["s", oid, "nope"]
        with client.start_session() as session:  # a session of its own, outside a transaction
            assert coll.find_one({"_id": "s"}, session=session) == {"_id": "s", "n": 1}
        assert taken == ["s", oid, "nope", "s"]


@pytest.mark.skipif(bool(os.environ.get("MONGODB_URI")), reason="the embedded engine's shim")
def test_a_find_by_id_while_a_write_holds_the_engine_waits_on_a_worker_not_on_the_loop(
    engine_uri: str, db_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The primary-key read runs on the engine's loop only when the engine's lock is free: while
    another thread holds it (a write), the find waits on a worker and the loop still serves
    everyone else (a ping answers); once the lock is released the find answers."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    engines: list[Any] = []
    asked = threading.Event()
    original = mongoeco.FastIdEngine._one

    def capturing(self: Any, *args: Any) -> Any:
        engines.append(self)
        asked.set()
        return original(self, *args)

    with (
        MongoClient[dict[str, Any]](engine_uri) as client,
        MongoClient[dict[str, Any]](engine_uri, socketTimeoutMS=60_000) as other,  # fails, never hangs
        ThreadPoolExecutor(1) as pool,
    ):
        coll = client[db_name]["c"]
        coll.insert_one({"_id": "s", "n": 1})
        monkeypatch.setattr(mongoeco.FastIdEngine, "_one", capturing)
        assert coll.find_one({"_id": "s"}) == {"_id": "s", "n": 1}
        lock = engines[0]._lock
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with lock:
                held.set()
                release.wait()

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait()
        asked.clear()
        try:
            waiting = pool.submit(coll.find_one, {"_id": "s"})
            asked.wait()  # the find is in the engine, waiting for the lock
            assert other.admin.command("ping")["ok"] == 1  # the loop is not blocked
        finally:
            release.set()
            holder.join()
        assert waiting.result() == {"_id": "s", "n": 1}
        assert len(engines) == 2


@pytest.mark.skipif(bool(os.environ.get("MONGODB_URI")), reason="the embedded engine's shim")
def test_a_find_by_id_whose_ttl_purge_runs_long_does_not_hold_the_loop(
    engine_uri: str, db_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read first purges the collection's expired documents (mongoeco's TTL): a write of any
    size (3,000 expired documents took 342-367 ms, during which every other client's ping waited
    as long when that purge ran on the engine's loop). A find by `_id` on a collection with a TTL
    index must leave the loop free while it purges: the purge is held here (a failpoint) and a
    ping from another client still answers."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    armed, purging, release = threading.Event(), threading.Event(), threading.Event()
    original = mongoeco.FastIdEngine._purge_expired_documents_sync

    def held(self: Any, conn: Any, db: str, coll: str, **kwargs: Any) -> Any:
        if armed.is_set() and db == db_name:
            purging.set()
            release.wait()
        return original(self, conn, db, coll, **kwargs)

    with (
        MongoClient[dict[str, Any]](engine_uri) as client,
        MongoClient[dict[str, Any]](engine_uri, socketTimeoutMS=30_000) as other,  # fails, never hangs
        ThreadPoolExecutor(1) as pool,
    ):
        coll = client[db_name]["c"]
        coll.create_index("expires_at", expireAfterSeconds=0)
        coll.insert_one({"_id": "s", "n": 1})
        coll.insert_one({"_id": "expired", "expires_at": datetime(2000, 1, 1)})  # the next read purges it
        assert other.admin.command("ping")["ok"] == 1
        monkeypatch.setattr(mongoeco.FastIdEngine, "_purge_expired_documents_sync", held)
        armed.set()
        try:
            finding = pool.submit(coll.find_one, {"_id": "s"})
            purging.wait()  # the find is in the engine, purging
            assert other.admin.command("ping")["ok"] == 1  # the loop is not blocked
        finally:
            release.set()
        assert finding.result() == {"_id": "s", "n": 1}
        assert coll.find_one({"_id": "expired"}) is None


@pytest.mark.skipif(bool(os.environ.get("MONGODB_URI")), reason="the embedded engine's shim")
def test_a_find_by_id_on_a_ttl_collection_with_nothing_due_stays_on_the_loop(
    engine_uri: str, db_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TTL index alone (memories have one) does not cost the loop path: only a due document
    sends the read to a worker, and the next read, with nothing due, is on the loop again."""
    import threading

    threads: list[str] = []
    original = mongoeco.FastIdEngine._get_document_sync

    def noting(self: Any, db: str, *args: Any, **kwargs: Any) -> Any:
        if db == db_name:
            threads.append(threading.current_thread().name)
        return original(self, db, *args, **kwargs)

    with MongoClient[dict[str, Any]](engine_uri) as client:
        coll = client[db_name]["c"]
        coll.create_index("expires_at", expireAfterSeconds=0)
        coll.insert_one({"_id": "s", "n": 1, "expires_at": datetime(2999, 1, 1)})
        coll.insert_one({"_id": "expired", "expires_at": datetime(2000, 1, 1)})
        monkeypatch.setattr(mongoeco.FastIdEngine, "_get_document_sync", noting)
        assert coll.find_one({"_id": "s"}, {"n": 1}) == {"_id": "s", "n": 1}  # purges "expired"
        assert coll.find_one({"_id": "s"}, {"n": 1}) == {"_id": "s", "n": 1}
        assert coll.find_one({"_id": "expired"}) is None
    loop = "mongogate-embedded"  # engine/embedded.py's thread
    assert threads[0] != loop
    assert threads[1:] == [loop, loop]


def test_mongoeco_purge_reads_the_ttl_entries_the_fast_id_engine_checks() -> None:
    """FastIdEngine runs on the loop only when mongoeco's purge would delete nothing, by the
    purge's own candidate query (TTL_DUE): the table, columns and helpers must stay."""
    from mongoeco.engines.sqlite import SQLiteEngine

    purge = inspect.getsource(SQLiteEngine._purge_expired_documents_sync)
    assert "FROM ttl_index_entries" in purge
    assert "WHERE collection_id = ? AND expires_at_epoch_ms <= ?" in purge
    assert "self._lookup_collection_id(conn, db_name, coll_name)" in purge
    assert "int(now.timestamp() * 1_000)" in purge
    assert list(inspect.signature(SQLiteEngine._load_indexes).parameters) == ["self", "db_name", "coll_name"]


@pytest.mark.skipif(bool(os.environ.get("MONGODB_URI")), reason="the embedded engine's shim")
def test_finds_by_id_racing_writes_see_each_write_whole_and_in_order(engine_uri: str, db_name: str) -> None:
    """Readers on the loop path race a writer on the engine's workers (update, findAndModify,
    replace, updateMany in turn, each setting `a`, `b` and the last array element together): no
    read sees a write half applied or goes back in time, and a read after a write's
    acknowledgement, from another client, sees it."""
    import threading

    from pymongo import ReturnDocument

    rounds, last = 200, -1
    start = threading.Barrier(3)
    seen: list[object] = []
    with (
        MongoClient[dict[str, Any]](engine_uri) as writer_client,
        MongoClient[dict[str, Any]](engine_uri) as after,
        MongoClient[dict[str, Any]](engine_uri) as r1,
        MongoClient[dict[str, Any]](engine_uri) as r2,
    ):
        coll = writer_client[db_name]["c"]
        coll.insert_one({"_id": "s", "a": 0, "b": 0, "arr": [0]})

        def write() -> None:
            start.wait()
            for i in [*range(1, rounds + 1), last]:
                change = {"$set": {"a": i, "b": i}, "$push": {"arr": i}}
                if i % 4 == 0:
                    coll.update_one({"_id": "s"}, change)
                elif i % 4 == 1:
                    coll.find_one_and_update({"_id": "s"}, change, return_document=ReturnDocument.AFTER)
                elif i % 4 == 2:
                    coll.replace_one({"_id": "s"}, {"a": i, "b": i, "arr": [*range(i % 7), i]})
                else:
                    coll.update_many({"_id": {"$in": ["s", "other"]}}, change)
                acked = after[db_name]["c"].find_one({"_id": "s"}, {"a": 1})
                if acked is None or (i != last and acked["a"] < i):
                    seen.append(("stale after the acknowledgement", i, acked))

        def read(client: MongoClient[dict[str, Any]]) -> None:
            newest = 0
            start.wait()
            while True:
                d = client[db_name]["c"].find_one({"_id": "s"}, {"a": 1, "b": 1, "arr": {"$slice": -1}})
                if d is None or d["a"] == last:
                    break
                if d["a"] != d["b"] or d["arr"] != [d["a"]] or d["a"] < newest:
                    seen.append(d)
                newest = d["a"]

        threads = [
            threading.Thread(target=write),
            *(threading.Thread(target=read, args=(c,)) for c in (r1, r2)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert seen == []


def test_mongoeco_write_scopes_roll_back_through_the_method_the_session_safe_engine_overrides() -> None:
    from mongoeco.engines.sqlite import SQLiteEngine
    from mongoeco.session import ClientSession

    assert list(inspect.signature(SQLiteEngine._rollback_write).parameters) == ["self", "conn", "context"]
    begin = getattr(SQLiteEngine, mongoeco.BEGIN_WRITE)
    assert list(inspect.signature(begin).parameters) == ["self", "conn", "context"]
    assert isinstance(ClientSession.has_ended, property)
    assert issubclass(mongoeco.FastIdEngine, mongoeco.SessionSafeEngine)


@pytest.mark.skipif(bool(os.environ.get("MONGODB_URI")), reason="the embedded engine's shim")
def test_a_write_whose_session_ends_midway_leaves_no_transaction_open(
    engine_uri: str, db_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client ends its session (`endSessions`, what a driver sends when it closes) while its
    insert is inside the engine, between `BEGIN IMMEDIATE` and the write (a failpoint holds it
    there): the insert fails, and the engine's shared connection is back outside any transaction,
    so the next client's write is committed (seen through a connection of its own to the file)
    instead of running inside the dead one's transaction (issue 38: the next worker's writes took
    5 s each)."""
    import sqlite3
    import threading
    from concurrent.futures import ThreadPoolExecutor

    engines: list[Any] = []
    began, release = threading.Event(), threading.Event()
    armed = threading.Event()
    original = getattr(mongoeco.FastIdEngine, mongoeco.BEGIN_WRITE)

    def held(self: Any, conn: Any, context: Any) -> None:
        original(self, conn, context)
        if armed.is_set():
            armed.clear()
            engines.append(self)
            began.set()
            release.wait(60)  # a hang guard only: the test releases it

    monkeypatch.setattr(mongoeco.FastIdEngine, mongoeco.BEGIN_WRITE, held)
    with (
        MongoClient[dict[str, Any]](engine_uri) as client,
        MongoClient[dict[str, Any]](engine_uri) as other,
        ThreadPoolExecutor(1) as pool,
    ):
        coll = client[db_name]["c"]
        with client.start_session() as session:
            armed.set()
            writing = pool.submit(coll.insert_one, {"_id": "lost"}, session=session)
            assert began.wait(60)
            other.admin.command("endSessions", [session.session_id])  # its client closes
            release.set()
            with pytest.raises(OperationFailure):
                writing.result()
        [engine] = engines
        assert not engine._connection.in_transaction
        other[db_name]["c"].insert_one({"_id": "after"})
        [(path,)] = engine._connection.execute("SELECT file FROM pragma_database_list WHERE name = 'main'")
        reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            stored = reader.execute("SELECT document FROM documents WHERE storage_key LIKE '%''after''%'")
            assert len(stored.fetchall()) == 1  # committed: another connection sees it
        finally:
            reader.close()
        assert other[db_name]["c"].find_one({"_id": "lost"}) is None
