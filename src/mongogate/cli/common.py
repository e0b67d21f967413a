"""What every command shares: settings from `--config` and the tool registry."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from mongogate.config import Settings, load_settings

if TYPE_CHECKING:
    from mongogate.tools.registry import ToolRegistry


def settings_from(args: argparse.Namespace, **overrides: Any) -> Settings:
    return load_settings(getattr(args, "config", None), **overrides)


def data_dir_line(settings: Settings) -> str:
    """Which data directory a command uses, absolute, and why (the engine, the audit file)."""
    path = settings.server.data_dir.expanduser().resolve()
    if os.environ.get("MONGOGATE_SERVER__DATA_DIR"):
        why = "from MONGOGATE_SERVER__DATA_DIR"
    elif settings.config_file is not None:
        why = "relative paths follow the config file"
    else:
        why = "no config file: relative to the working directory"
    return f"data directory: {path} ({why})"


def registry_for(settings: Settings, demo: bool) -> ToolRegistry:
    from mongogate.tools.registry import ToolRegistry  # late: keeps `audit` and `token` quick

    registry = ToolRegistry.from_settings(settings)
    if demo:
        from mongogate.demo import DEMO_SPECS, seed_demo

        for spec in DEMO_SPECS:
            if spec.name not in {s.name for s in registry.query_specs}:
                registry.add_query_tool(spec)
        registry.on_startup(seed_demo)
    return registry
