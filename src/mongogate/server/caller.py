"""What prompts and resources share with the tools: the caller, the state, one error mapping.

A prompt or resource request is not a tool call, so a failure is a JSON-RPC error, not a tool
result: a bad argument, an unknown name or an id the caller cannot see (another tenant's reads as
missing) is ``-32602`` (invalid params) with the message in the one format
``[code] message`` (a missing scope too: over HTTP the SDK has already answered a request
without a valid token with 401). A storage failure is ``-32603`` (internal error).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from mongogate.errors import MongogateError, StorageError
from mongogate.principal import Principal
from mongogate.tools.state import AppState, app_state

log = logging.getLogger(__name__)
T = TypeVar("T")


async def caller(ctx: ServerRequestContext[Any, Any]) -> tuple[AppState, Principal]:
    """The server state (once the database is open) and the caller, resolved as the tools do."""
    state = await app_state(ctx.lifespan_context)
    return state, state.principal(ctx)


def invalid(message: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=message)


async def answered(what: str, body: Callable[[], Awaitable[T]]) -> T:
    """Run ``body``; a mongogate error becomes the JSON-RPC error its kind calls for."""
    try:
        return await body()
    except MCPError:
        raise
    except StorageError as e:
        log.warning("%s: %s", what, e)
        raise MCPError(code=INTERNAL_ERROR, message=f"[{e.code}] (retryable) {e}") from e
    except MongogateError as e:
        log.info("%s: %s", what, e)
        raise invalid(f"[{e.code}] {e}") from e
