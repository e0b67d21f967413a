"""mongogate: durable agent memory and tenant-scoped read-only query tools on MongoDB over MCP.

The public Python API is what ``__all__`` names (docs/API.md); every other module and name is
private and may change without notice. The names load on first use (PEP 562): ``import
mongogate`` stays cheap (every command, the CLI included, imports this package first) and
imports neither mcp nor pymongo until a name that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mongogate.version import __version__

if TYPE_CHECKING:  # what mypy and IDEs see; at run time __getattr__ below loads them
    from mongogate.assembly import erase
    from mongogate.clock import Clock, ManualClock, SystemClock
    from mongogate.config import Settings, load_settings
    from mongogate.erasure import CollectionReceipt, ErasureReceipt
    from mongogate.errors import (
        ConfigError,
        InvalidInput,
        LeaseBusy,
        LeaseLost,
        MongogateError,
        NotFound,
        StorageError,
    )
    from mongogate.runs import Checkpoint, RunLease, Runs, SaveResult
    from mongogate.scheduler import (
        Agent,
        AgentRegistry,
        Investigation,
        Investigations,
        OpenResult,
        TickContext,
        TickEvent,
    )
    from mongogate.server.app import build_server
    from mongogate.server.http import serve_http
    from mongogate.server.preflight import StartupChecks
    from mongogate.specs import QueryToolSpec
    from mongogate.tools.registry import StartupHook, ToolRegistry
    from mongogate.tools.state import AppState

#: public name -> (module, attribute): the one table of what the package root offers
_LAZY: dict[str, tuple[str, str]] = {
    "Settings": ("mongogate.config", "Settings"),
    "load_settings": ("mongogate.config", "load_settings"),
    "QueryToolSpec": ("mongogate.specs", "QueryToolSpec"),
    # the find/aggregate variants of QueryToolSpec (the discriminated union of issue 21)
    "FindToolSpec": ("mongogate.specs", "FindToolSpec"),
    "AggregateToolSpec": ("mongogate.specs", "AggregateToolSpec"),
    "ToolRegistry": ("mongogate.tools.registry", "ToolRegistry"),
    "StartupHook": ("mongogate.tools.registry", "StartupHook"),
    "AppState": ("mongogate.tools.state", "AppState"),
    "build_server": ("mongogate.server.app", "build_server"),
    "StartupChecks": ("mongogate.server.preflight", "StartupChecks"),
    "serve_http": ("mongogate.server.http", "serve_http"),
    "MongogateError": ("mongogate.errors", "MongogateError"),
    "ConfigError": ("mongogate.errors", "ConfigError"),
    # scheduled agents (`mongogate worker`): what an agent is and everything a tick is handed
    "Agent": ("mongogate.scheduler.agents", "Agent"),
    "AgentRegistry": ("mongogate.scheduler.agents", "AgentRegistry"),
    "TickContext": ("mongogate.scheduler.agents", "TickContext"),
    "TickEvent": ("mongogate.scheduler.events", "TickEvent"),
    "Runs": ("mongogate.runs", "Runs"),
    "RunLease": ("mongogate.runs", "RunLease"),
    "Checkpoint": ("mongogate.runs", "Checkpoint"),
    "SaveResult": ("mongogate.runs", "SaveResult"),
    "Investigations": ("mongogate.scheduler.investigations", "Investigations"),
    "Investigation": ("mongogate.scheduler.investigations", "Investigation"),
    "OpenResult": ("mongogate.scheduler.investigations", "OpenResult"),
    # erasure with a receipt (`mongogate erase`; docs/security.md, "Erasure")
    "erase": ("mongogate.assembly", "erase"),
    "ErasureReceipt": ("mongogate.erasure", "ErasureReceipt"),
    "CollectionReceipt": ("mongogate.erasure", "CollectionReceipt"),
    "Clock": ("mongogate.clock", "Clock"),
    "SystemClock": ("mongogate.clock", "SystemClock"),
    "ManualClock": ("mongogate.clock", "ManualClock"),
    # the errors a tick's calls raise on purpose (all MongogateError)
    "LeaseBusy": ("mongogate.errors", "LeaseBusy"),
    "LeaseLost": ("mongogate.errors", "LeaseLost"),
    "NotFound": ("mongogate.errors", "NotFound"),
    "InvalidInput": ("mongogate.errors", "InvalidInput"),
    "StorageError": ("mongogate.errors", "StorageError"),
}

__all__ = [
    "Agent",
    "AgentRegistry",
    "AggregateToolSpec",
    "AppState",
    "Checkpoint",
    "Clock",
    "CollectionReceipt",
    "ConfigError",
    "ErasureReceipt",
    "FindToolSpec",
    "InvalidInput",
    "Investigation",
    "Investigations",
    "LeaseBusy",
    "LeaseLost",
    "ManualClock",
    "MongogateError",
    "NotFound",
    "OpenResult",
    "QueryToolSpec",
    "RunLease",
    "Runs",
    "SaveResult",
    "Settings",
    "StartupChecks",
    "StartupHook",
    "StorageError",
    "SystemClock",
    "TickContext",
    "TickEvent",
    "ToolRegistry",
    "__version__",
    "build_server",
    "erase",
    "load_settings",
    "serve_http",
]


def __getattr__(name: str) -> Any:
    """Load a public name on first use and keep it (later look-ups do not come here)."""
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'mongogate' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
