"""The tools' JSON schemas, generated when a model changes rather than at every start.

Generating the input and output schemas of mongogate's own tools with pydantic was about 40-60
ms of CPU at every `serve` (benchmarks/startup.py, load 2-4), before `tools/list` was answered.
They depend only on the models' code, so they are generated once and kept beside it, in
`schemas.json` (input: pydantic's `model_json_schema`; output: the lean form,
tools/output_schema.py), keyed by each model's module and name. A model not found there (an
application's own tool, or a tool the default settings do not build) is generated as before.

The same file declares mongogate's own tools (their names, titles, descriptions, annotations
and which models they take and give), so that a server lists them without importing their
modules (`tools/stored_tools.py`).

`tests/tools/test_stored_schemas.py` fails when the file no longer matches the models; rewrite it
with ``python -m mongogate.tools.write_schemas``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Literal

__all__ = ["PATH", "declarations", "declare", "generated", "key", "stored", "text"]

PATH = Path(__file__).with_name("schemas.json")
Kind = Literal["input", "output"]

#: False: every schema is generated from its model (what tools/write_schemas.py `generate` records)
USE = True
#: the schemas generated from their models since recording began (a dict): kind -> key -> text
GENERATED: dict[str, dict[str, str]] | None = None
#: the tools declared (`make_tool`) since recording began (a list), in order
DECLARED: list[dict[str, Any]] | None = None


def key(model: type[Any]) -> str:
    return f"{model.__module__}.{model.__qualname__}"


def forget() -> None:
    """Read the file again at the next look-up (after it is rewritten)."""
    _file.cache_clear()


@functools.cache
def _file() -> dict[str, Any]:
    try:
        loaded: dict[str, Any] = json.loads(PATH.read_text(encoding="utf-8"))
    except FileNotFoundError:  # a checkout before the first `python -m mongogate.tools.write_schemas`
        return {}
    return loaded


def stored(kind: Kind, model: type[Any]) -> str | None:
    """The stored schema text of ``model``, or None: generate it."""
    return text(kind, key(model))


def text(kind: Kind, model_key: str) -> str | None:
    """The stored schema text of the model of that key (`key`), or None."""
    found: str | None = _file().get(kind, {}).get(model_key) if USE else None
    return found


def declarations(family: str) -> list[dict[str, Any]] | None:
    """The stored declarations of a family of mongogate's tools (`tools/stored_tools.py`), or
    None: build them from their modules."""
    found: list[dict[str, Any]] | None = _file().get("tools", {}).get(family) if USE else None
    return found


def declare(declaration: dict[str, Any]) -> None:
    """Note a tool `make_tool` built (when recording)."""
    if DECLARED is not None:
        DECLARED.append(declaration)


def generated(kind: Kind, model: type[Any], text: str) -> str:
    """Note a schema generated from its model (when recording); returns ``text``."""
    if GENERATED is not None:
        GENERATED.setdefault(kind, {})[key(model)] = text
    return text
