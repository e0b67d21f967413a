"""Rewrite tools/schemas.json from the models: ``python -m mongogate.tools.write_schemas``.

Run it when a tool's input or output model changes (tests/tools/test_stored_schemas.py fails until
then); tools/stored_schemas.py says why the schemas are stored.
"""

from __future__ import annotations

import json
from typing import Any

from mongogate.config import Settings
from mongogate.tools import base, output_schema, stored_schemas
from mongogate.tools.registry import ToolRegistry
from mongogate.tools.stored_tools import FAMILIES, family_tools

__all__ = ["generate", "main"]


def _clear() -> None:
    base.clear_schema_cache()
    output_schema.clear_schema_cache()


def generate() -> dict[str, Any]:
    """Every schema the tools of a server with default settings publish, generated from the models,
    and each built-in family's tool declarations (tools/stored_tools.py), as `make_tool` saw them."""
    stored_schemas.USE, stored_schemas.GENERATED = False, {}
    _clear()
    try:
        ToolRegistry().build(Settings())
        made = stored_schemas.GENERATED
        out: dict[str, Any] = {kind: dict(sorted(texts.items())) for kind, texts in sorted(made.items())}
        declared: dict[str, list[dict[str, Any]]] = {}
        for family in FAMILIES:
            stored_schemas.DECLARED = []
            # from the family's module (nothing is read from the file), in the order it lists them
            order = [t.name for t in family_tools(family, Settings())]
            by_name = {d["name"]: d for d in stored_schemas.DECLARED}
            declared[family] = [by_name[name] for name in order]
        out["tools"] = declared
        return out
    finally:
        stored_schemas.USE, stored_schemas.GENERATED, stored_schemas.DECLARED = True, None, None
        _clear()


def main() -> None:
    stored_schemas.PATH.write_text(json.dumps(generate(), indent=1) + "\n", encoding="utf-8")
    stored_schemas.forget()
    print(f"wrote {stored_schemas.PATH}")


if __name__ == "__main__":
    main()
