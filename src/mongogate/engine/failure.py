"""What kind of failure stopped an engine start, carried to the starter as a value, never as text.

The engine process tells its detached parent through a pipe, and that parent tells the process
that spawned it (`client.spawn`) on the last line of its stderr: one JSON object
``{"kind": ..., "message": ...}``. The kind picks the error class, so the exit status says what
an operator should do (docs/operations.md, "Exit statuses"):

- ``config``: the data directory itself is wrong (another user's, a symlink among mongogate's
  files, damaged credentials, a path too long): fix it -> ConfigError, 2;
- ``in_use``: another process kept a lock past its bound (the line names the file): end or
  resume that process -> InUse, 4;
- ``unreachable``: the engine failed or died while starting for a runtime reason (its SQLite
  file cannot be opened, the process was killed): see its log, retry -> StorageError, 3.

A last line that is no such object (an engine process of an older version while mongogate is
being upgraded, or a traceback) stays a ConfigError with its text, as before.
"""

from __future__ import annotations

import json
from typing import Literal

from mongogate.errors import ConfigError, InUse

Kind = Literal["config", "in_use", "unreachable"]
KINDS: tuple[Kind, ...] = ("config", "in_use", "unreachable")


def kind_of(e: BaseException) -> Kind:
    """A refusal mongogate raised keeps its class; anything else is a runtime failure."""
    if isinstance(e, InUse):
        return "in_use"
    if isinstance(e, ConfigError):
        return "config"
    return "unreachable"


def word(kind: Kind, message: str) -> str:
    """The one line that carries a failure (newlines in the message folded: it stays one line)."""
    return json.dumps({"kind": kind, "message": " ".join(message.split())})


def word_of(e: BaseException) -> str:
    return word(kind_of(e), str(e) or type(e).__name__)


def read(line: str) -> tuple[Kind, str]:
    """(kind, message) from a failure's line; plain text (an older engine process) is "config"."""
    try:
        data = json.loads(line)
    except ValueError:
        return "config", line
    if isinstance(data, dict):
        kind, message = data.get("kind"), data.get("message")
        for known in KINDS:
            if kind == known and isinstance(message, str):
                return known, message
    return "config", line
