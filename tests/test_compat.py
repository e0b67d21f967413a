"""Each library internal mongogate leans on (mongogate/compat/), pinned to the installed version.

When one of these fails after an upgrade, read the library's new source, adapt the one wrapper in
compat/, and move the pin: nothing else of mongogate touches these names.
"""

from __future__ import annotations

import inspect
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from pymongo import MongoClient

from mongogate.compat import mongoeco, sdk, settings
from mongogate.compat.uvicorn import H11Protocol
from mongogate.config import load_settings

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_pins_are_the_installed_versions() -> None:
    """The versions the wrappers below were read against; a new one means re-reading them."""
    assert version("mcp").startswith("2.3.")
    assert version("uvicorn").startswith("0.54.")
    assert version("pydantic-settings").startswith("2.")
    assert version("mongoeco").startswith("4.11.")


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
