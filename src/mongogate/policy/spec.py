"""Compatibility: the spec model lives in mongogate.specs (the base layer; config uses it too)."""

from __future__ import annotations

from mongogate.specs import DEFAULT_OPERATORS, SUPPORTED_OPERATORS, FieldType, QueryToolSpec

__all__ = ["DEFAULT_OPERATORS", "SUPPORTED_OPERATORS", "FieldType", "QueryToolSpec"]
