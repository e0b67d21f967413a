"""Rewrite tools/schemas.json from the models: ``python -m mongogate.tools.write_schemas``.

Run it when a tool's input or output model changes (tests/tools/test_stored_schemas.py fails until
then); tools/stored_schemas.py says why the schemas are stored.
"""

from __future__ import annotations

import json

from mongogate.config import Settings
from mongogate.tools import base, output_schema, stored_schemas
from mongogate.tools.registry import ToolRegistry

__all__ = ["generate", "main"]


def _clear() -> None:
    base.clear_schema_cache()
    output_schema.clear_schema_cache()


def generate() -> dict[str, dict[str, str]]:
    """Every schema the tools of a server with default settings publish, generated from the models."""
    stored_schemas.USE, stored_schemas.GENERATED = False, {}
    _clear()
    try:
        ToolRegistry().build(Settings())
        made = stored_schemas.GENERATED
        return {kind: dict(sorted(texts.items())) for kind, texts in sorted(made.items())}
    finally:
        stored_schemas.USE, stored_schemas.GENERATED = True, None
        _clear()


def main() -> None:
    stored_schemas.PATH.write_text(json.dumps(generate(), indent=1) + "\n", encoding="utf-8")
    stored_schemas.forget()
    print(f"wrote {stored_schemas.PATH}")


if __name__ == "__main__":
    main()
