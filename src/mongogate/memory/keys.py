"""Input checks and message keys. Keys come from the work (turn, role, call), never from time."""

from __future__ import annotations

from typing import Literal, get_args

from mongogate.errors import InvalidInput
from mongogate.keyed import keyed_id
from mongogate.values import shown, storable, utf8_size

Role = Literal["user", "assistant", "tool", "system"]
ROLES: tuple[str, ...] = get_args(Role)
#: a session title, in UTF-8 bytes
MAX_TITLE_BYTES = 1024


def _invisible(c: str) -> bool:
    """C0 and C1 control characters, DEL, and the Unicode line and paragraph separators: they end or
    hide log lines and keys, and look like nothing in a client."""
    o = ord(c)
    return o < 32 or 0x7F <= o <= 0x9F or o in (0x2028, 0x2029)


def check_id(value: object, what: str, max_len: int) -> str:
    """Ids become parts of keys, so ':' (the key separator), NUL and control characters are refused
    (C0, DEL, C1, U+2028, U+2029)."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{what} must be a non-empty string")
    if len(value) > max_len:
        raise InvalidInput(f"{what} is {len(value)} characters long; the maximum is {max_len}")
    if ":" in value or any(_invisible(c) for c in value):
        raise InvalidInput(f"{what} {value[:40]!r} may not contain ':' or control characters")
    return storable(value, what)  # BSON cannot store a lone surrogate: not an internal error


def check_content(content: object, what: str, max_bytes: int) -> str:
    if not isinstance(content, str):
        raise InvalidInput(f"{what} must be a string")
    size = utf8_size(content, what)
    if size > max_bytes:
        raise InvalidInput(
            f"{what} is {size} bytes; the maximum is {max_bytes} (memory.max_message_bytes). "
            "Store a summary or a reference instead."
        )
    return content


def check_role(role: object) -> str:
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidInput(f"role {shown(role)} is unknown; use one of {', '.join(ROLES)}")
    return role


def answer_key(turn_id: str) -> str:
    """The key of a turn's final answer: one per turn, written through the session's commit point."""
    return f"{turn_id}:assistant"


def message_key(turn_id: str, role: str, call_id: str | None) -> str:
    """`<turn>:user`, `<turn>:system`, `<turn>:assistant`, `<turn>:assistant:<call>`, `<turn>:tool:<call>`."""
    check_role(role)
    if role in ("user", "system"):
        if call_id is not None:
            raise InvalidInput(f"a {role} message takes no call_id; only assistant and tool messages do")
        return f"{turn_id}:{role}"
    if role == "tool":
        if call_id is None:
            raise InvalidInput("a tool message needs the call_id of the tool call it answers")
        return f"{turn_id}:tool:{call_id}"
    return answer_key(turn_id) if call_id is None else f"{turn_id}:assistant:{call_id}"


def message_id(session_id: str, key: str) -> str:
    """A message's `_id`: its session and key (`<session>:<key>`). Session ids hold no ':', so the
    first ':' ends the session: two messages share an `_id` only if they share session and key,
    which is how a repeat is refused (docs/decisions/turn-write-path.md)."""
    return keyed_id(session_id, key)
