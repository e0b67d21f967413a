"""Every place mongogate leans on another library's internals, named in one package.

Each module wraps one library's private surface, and ``tests/test_compat.py`` pins each to the
version installed (it fails first when an upgrade moves something), so an upgrade is one file
to read, not a grep:

- mcp 2.3: ``Tool(fn_metadata=FuncMetadata(...))`` and ``ArgModelBase`` (a tool built from a
  schema, not a signature): ``sdk.tool_metadata``, ``sdk.ArgModelBase``.
- mcp 2.3: ``MCPServer._lowlevel_server`` and its ``_request_handlers`` (what is registered is
  advertised): ``sdk.drop_request_handlers``, ``sdk.add_request_handler``.
- mcp 2.3: ``StreamableHTTPSessionManager._admit_session``, ``_discard_session``,
  ``_server_instances``, ``_session_owners`` and ``_task_group`` (the per-principal session cap
  of server/session_cap.py): ``sdk.session_hooks``, ``sdk.set_session_hooks``,
  ``sdk.forget_session``, ``sdk.session_task_group``.
- uvicorn 0.55 (read against 0.54, and again at 0.55: only Python 3.10 branches went):
  ``H11Protocol`` (``cycle``, ``headers``, ``handle_events``: the request-head deadline of
  server/http.py) and ``flow_control.CLOSE_HEADER``: ``uvicorn.H11Protocol``,
  ``uvicorn.CLOSE_HEADER``.
- mongoeco 4.11: ``AsyncMongoEcoProxyServer``'s private lifecycle and
  ``mongoeco.wire._lifecycle.finish_cleanup`` (serving on a Unix socket):
  ``mongoeco.UnixProxyServer``; ``_connections``: ``mongoeco.open_connections``.
- pydantic-settings 2: ``TomlConfigSettingsSource._read_file`` (paths relative to the file):
  ``settings.PostReadToml``.

ruff's SLF001 (private member access) is on for src/ with this package the only exemption, so
a new reach into a library's internals fails ``make lint`` until it moves here with a pin.
(SLF001 does not see ``from lib._private import x``: a private module is imported only here too,
by review.) The modules import nothing else of mongogate, so any layer may use the one it needs (``config``
uses ``settings`` without importing MCP).
"""

from __future__ import annotations

#: {distribution: (the wrapper module in this package, the version prefix it was read against)}.
#: tests/test_compat.py fails naming the wrapper when the installed version leaves its prefix, and
#: `make lock` (requirements/lock.py) names the wrapper to re-read when the lock moves the package.
WRAPPED: dict[str, tuple[str, str]] = {
    "mcp": ("sdk.py", "2.3."),
    "uvicorn": ("uvicorn.py", "0.55."),
    "mongoeco": ("mongoeco.py", "4.11."),
    "pydantic-settings": ("settings.py", "2."),
}
