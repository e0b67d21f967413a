"""`--embed module:attr`: the query tools an application registers in code, for `check` and `spec`.

``attr`` may be a ``ToolRegistry`` (what ``build_server`` is given), a ``QueryToolSpec``, a list of
specs, or a function returning one of those (called with the settings when it takes an
argument), so the registry an application builds for ``build_server`` is checked as it is
served. ``module`` is a dotted module name or a path to a ``.py`` file (run without
``__name__ == "__main__"``, so its ``main()`` does not start).
"""

from __future__ import annotations

import importlib
import inspect
import runpy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mongogate.config import Settings
from mongogate.errors import ConfigError
from mongogate.specs import QueryToolSpec

HELP = (
    "query tools registered in code: package.module:attr or path/to/file.py:attr (a ToolRegistry, a "
    "QueryToolSpec, a list of them, or a function returning one); repeatable"
)


def _load(ref: str) -> object:
    where, sep, attr = ref.rpartition(":")
    if not sep or not where or not attr:
        raise ConfigError(f"--embed {ref!r} must look like 'package.module:attr' or 'path/to/file.py:attr'")
    try:
        if where.endswith(".py"):
            if not Path(where).is_file():
                raise ConfigError(f"--embed {ref!r}: file {where} does not exist")
            namespace = runpy.run_path(where, run_name="mongogate_embed")
        else:
            namespace = vars(importlib.import_module(where))
    except ConfigError:
        raise
    except Exception as e:  # the application's own import failed: say which, and how
        raise ConfigError(f"--embed {ref!r}: loading {where} failed: {type(e).__name__}: {e}") from e
    if attr not in namespace:
        raise ConfigError(f"--embed {ref!r}: {where} has no attribute {attr!r}")
    return namespace[attr]


def _specs(obj: object, ref: str, settings: Settings) -> list[QueryToolSpec]:
    from mongogate.tools.registry import ToolRegistry  # late: keeps `--help` quick

    if callable(obj) and not isinstance(obj, ToolRegistry | QueryToolSpec | type):
        try:
            takes = len(inspect.signature(obj).parameters)
            obj = obj(settings) if takes else obj()
        except Exception as e:
            raise ConfigError(f"--embed {ref!r}: calling it failed: {type(e).__name__}: {e}") from e
    if isinstance(obj, ToolRegistry):
        return obj.query_specs
    if isinstance(obj, QueryToolSpec):
        return [obj]
    if isinstance(obj, Iterable) and not isinstance(obj, str | bytes | dict):
        items: list[Any] = list(obj)
        if all(isinstance(s, QueryToolSpec) for s in items):
            return items
    raise ConfigError(
        f"--embed {ref!r} is a {type(obj).__name__}: expected a ToolRegistry, a QueryToolSpec, a list of "
        "QueryToolSpec, or a function returning one"
    )


def embedded_specs(refs: list[str] | None, settings: Settings) -> list[QueryToolSpec]:
    """The specs the references name, in order (none when ``refs`` is empty)."""
    out: list[QueryToolSpec] = []
    for ref in refs or []:
        out.extend(_specs(_load(ref), ref, settings))
    return out


def all_specs(settings: Settings, refs: list[str] | None) -> list[QueryToolSpec]:
    """The config file's query tools plus the embedded ones (a name registered twice counts once:
    the registry the application builds usually starts from the same settings)."""
    from mongogate.specs import check_tool_set

    seen = {s.name: s for s in settings.query_tools}
    for spec in embedded_specs(refs, settings):
        if spec.name in seen and seen[spec.name] != spec:
            raise ConfigError(f"query tool {spec.name!r} is in the config file and, different, in --embed")
        seen[spec.name] = spec
    specs = list(seen.values())
    check_tool_set(specs, settings.policy.allowed_operators)
    return specs
