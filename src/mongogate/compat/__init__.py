"""Every place mongogate leans on another library's internals, named in one package.

Each module wraps one library's private surface, and ``tests/test_compat.py`` pins each to the
version installed (it fails first when an upgrade moves something), so an upgrade is one file
to read, not a grep:

- mcp 2.3: ``Tool(fn_metadata=FuncMetadata(...))`` and ``ArgModelBase`` (a tool built from a
  schema, not a signature): ``sdk.tool_metadata``, ``sdk.ArgModelBase``.
- mcp 2.3: ``MCPServer._lowlevel_server`` and its ``_request_handlers`` (what is registered is
  advertised): ``sdk.drop_request_handlers``, ``sdk.add_request_handler``.
- uvicorn 0.54: ``H11Protocol`` (``cycle``, ``headers``, ``handle_events``: the request-head
  deadline of server/http.py): ``uvicorn.H11Protocol``.
- mongoeco 4.11: ``AsyncMongoEcoProxyServer._connections``: ``mongoeco.open_connections``.
- pydantic-settings 2: ``TomlConfigSettingsSource._read_file`` (paths relative to the file):
  ``settings.PostReadToml``.

The modules import nothing else of mongogate, so any layer may use the one it needs (``config``
uses ``settings`` without importing MCP).
"""
