"""The tool registry: memory tools plus the query tools operators register (config or code).

registry = ToolRegistry.from_settings(settings)
registry.add_query_tool(QueryToolSpec(name="find_invoices", ...))
registry.add_query_tool(QueryToolSpec(name="invoice_stats", kind="aggregate", ...))
server = build_server(settings, registry)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from mcp.server.mcpserver.tools import Tool

from mongogate.config import Settings
from mongogate.errors import ConfigError
from mongogate.specs import SUPPORTED_OPERATORS, QueryToolSpec, check_tool_set
from mongogate.tools.stored_tools import family_tools

if TYPE_CHECKING:
    from mongogate.tools.state import AppState

ToolFactory = Callable[[Settings], list[Tool]]
StartupHook = Callable[["AppState"], Awaitable[None]]


class ToolRegistry:
    def __init__(
        self, specs: Iterable[QueryToolSpec] = (), *, run_tools: bool = True, recall_tools: bool = True
    ) -> None:
        self._specs: dict[str, QueryToolSpec] = {}
        #: a name: a built-in family (tools/stored_tools.py), listed from its stored declarations
        self._factories: list[ToolFactory | str] = []
        self.startup_hooks: list[StartupHook] = []
        for spec in specs:
            self.add_query_tool(spec)
        if run_tools:  # checkpoints for long runs: save/load_checkpoint, run_events, acquire/release_run
            self._factories.append("runs")  # their indexes: built by the lifespan
        if recall_tools:  # long-term memory: remember, recall, forget, ...; built by the lifespan
            self._factories.append("recall")

    @classmethod
    def from_settings(cls, settings: Settings) -> ToolRegistry:
        return cls(settings.query_tools)

    @property
    def query_specs(self) -> list[QueryToolSpec]:
        return list(self._specs.values())

    def add_query_tool(self, spec: QueryToolSpec) -> None:
        """Register one scoped read-only query tool (find or aggregate), by the same rules as a
        [[query_tools]] entry (``policy.allowed_operators`` is checked when the server is built)."""
        if not isinstance(spec, QueryToolSpec):
            raise ConfigError(f"add_query_tool takes a QueryToolSpec, got {type(spec).__name__}")
        check_tool_set([*self._specs.values(), spec], SUPPORTED_OPERATORS)
        self._specs[spec.name] = spec

    def add_tools(self, factory: ToolFactory) -> None:
        """Add further tools built when the server is assembled (e.g. the run/checkpoint tools)."""
        self._factories.append(factory)

    def on_startup(self, hook: StartupHook) -> None:
        """Run ``hook(state)`` once the database is open (indexes, demo data...)."""
        self.startup_hooks.append(hook)

    def build(self, settings: Settings) -> list[Tool]:
        check_tool_set(self._specs.values(), settings.policy.allowed_operators)
        tools = family_tools("memory", settings)  # sessions and turns: every server's
        for spec in self._specs.values():
            from mongogate.tools.query_tools import query_tool  # late: only when query tools exist

            tools.append(query_tool(spec, settings))
        for factory in self._factories:
            tools.extend(family_tools(factory, settings) if isinstance(factory, str) else factory(settings))
        names = [t.name for t in tools]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"tool names registered twice: {dupes}")
        return tools
