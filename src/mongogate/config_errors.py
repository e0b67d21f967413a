"""Configuration errors an operator can act on: the key, where it came from, what would work.

Split from config.py (the settings models). Secrets are masked; an unknown key gets a "did you
mean"; a value from the environment names its variable.
"""

from __future__ import annotations

import json
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsError

from mongogate.errors import unknown_key
from mongogate.mongouri import without_password
from mongogate.specs import SpecError

_SECRET_KEYS = frozenset({"sha256", "jwt_secret"})
_URI_KEYS = frozenset({"uri", "query_uri"})


def mask(loc: tuple[Any, ...], value: object) -> str:
    """A value as shown in a config error: secrets as ``***``, URIs without their password."""
    keys = {str(p) for p in loc}
    if keys & _SECRET_KEYS:
        return "***"
    text = repr(value)
    if keys & _URI_KEYS:
        text = without_password(text)
    return text


def _env_name(loc: tuple[Any, ...], environ: dict[str, str]) -> str | None:
    """The environment variable that set ``loc`` (or one of its parents), if any."""
    upper = {k.upper(): k for k in environ}
    for i in range(len(loc), 0, -1):
        name = "MONGOGATE_" + "__".join(str(p) for p in loc[:i]).upper()
        if name in upper:
            return upper[name]
    return None


def _given(loc: tuple[Any, ...], overrides: dict[str, Any]) -> bool:
    """Whether the arguments to load_settings set ``loc`` (or a parent of it as a whole)."""
    value: Any = overrides
    for part in loc:
        if not isinstance(value, dict):
            return True  # a parent was given as one value
        if part not in value:
            return False
        value = value[part]
    return bool(loc)


def format_errors(
    root: type[BaseModel], exc: ValidationError, file: Path | None, overrides: dict[str, Any]
) -> str:
    """One line per problem under `invalid configuration[ in FILE]:`; `root` is the settings model."""
    environ = dict(os.environ)
    lines: list[str] = []
    from_file = False
    for err in exc.errors():
        loc = tuple(err["loc"])
        given = _given(loc, overrides)
        env = None if given else _env_name(loc, environ)
        for key_loc, message in _problems(root, err, loc):
            key = ".".join(str(p) for p in key_loc) or "(top level)"
            if env is not None:
                lines.append(f"  {key} (from environment variable {env}): {message}")
            elif given:
                lines.append(f"  {key} (from arguments): {message}")
            else:
                from_file = from_file or file is not None
                lines.append(f"  {key}: {message}")
    where = f" in {file}" if from_file and file is not None else ""
    return "\n".join([f"invalid configuration{where}:", *lines])


def _problems(root: type[BaseModel], err: Any, loc: tuple[Any, ...]) -> list[tuple[tuple[Any, ...], str]]:
    """(where, what) of one validation error: a [[query_tools]] entry's problems one per key
    inside it, an unknown key with its "did you mean", else pydantic's message and the value."""
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, SpecError):
        return [((*loc, *k.split(".")) if k != "(spec)" else loc, m) for k, m in cause.problems]
    if err["type"] == "extra_forbidden" and loc:
        return [(loc, unknown_key(str(loc[-1]), _keys_at(root, loc[:-1])))]
    got = err.get("input")
    shown = "" if isinstance(got, dict | list) or got is None else f" (got {mask(loc, got)})"
    return [(loc, err["msg"].removeprefix("Value error, ") + shown)]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``annotation`` (``X``, ``list[X]``, ``X | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (list, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _keys_at(root: type[BaseModel], path: tuple[Any, ...]) -> list[str]:
    """The keys a table at ``path`` accepts (for "did you mean"): ``()`` is the top level."""
    model: type[BaseModel] | None = root
    for part in path:
        if isinstance(part, int) or model is None:
            continue  # an index into a list of tables
        field = model.model_fields.get(str(part))
        model = _model_in(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


def env_problem(exc: SettingsError) -> str:
    """Name the environment variable whose value could not be parsed (JSON for lists and tables)."""
    found = re.search(r'field "([^"]+)"', str(exc))
    field = found.group(1).upper() if found else ""
    names = sorted(
        k
        for k in os.environ
        if k.upper() == f"MONGOGATE_{field}" or k.upper().startswith(f"MONGOGATE_{field}__")
    )
    bad = []
    for name in names:
        try:
            json.loads(os.environ[name])
        except ValueError:
            bad.append(name)
    named = bad or names
    if not named:
        return f"invalid configuration in the environment: {without_password(str(exc))}"
    return (
        f"invalid configuration in the environment variable {' / '.join(named)}: its value could not be "
        "parsed; a list or table needs JSON, e.g. MONGOGATE_SERVER__ALLOWED_HOSTS='[\"a.example\"]'"
    )
