"""The completions capability: the caller's own session ids and memory ids, by prefix.

`completion/complete` completes the prompts' `session_id` (`summarize_session`,
`extract_memories`), the `id` of `mongogate://sessions/{id}/context` (session ids) and the `id` of
`mongogate://memories/{id}` (memory ids). Scoped exactly as the tools are: sessions of the caller's
conversation scope (`tools/base.py` conversations_of), memories of the caller's long-term scope
with its required scopes (as `resources/read` checks them); another tenant's ids are never offered.

Bounded: at most 100 values (the specification's limit), in order, with `hasMore` when more
match (and `total` when all were sent). Cheap: answered from in-process copies kept fresh by a
revision read by `_id` (tools/session_ids.py, recall/completion.py); a scope is read whole only the
first time (with progress notifications when the client asked). A value no id could start with
(longer than `memory.max_id_length`, or holding ':' or a control character) is answered with no
values, without a read. An unknown prompt, template or argument is ``-32602``.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp_types import CompleteRequestParams, CompleteResult, Completion, PromptReference

from mongogate.policy import seg
from mongogate.recall import memory_ids, scope_for
from mongogate.server import prompts, resources
from mongogate.server.caller import answered, caller, invalid
from mongogate.tools.base import ID_PATTERN, conversations_of

__all__ = ["MAX_VALUES", "complete"]

log = logging.getLogger(__name__)
#: values in one answer (the specification: "must not exceed 100 items")
MAX_VALUES = 100
#: (prompt name or template URI, argument) -> what completes it
TARGETS = {
    **{(name, "session_id"): "sessions" for name in prompts.NAMES},
    (resources.CONTEXT_TEMPLATE, "id"): "sessions",
    (resources.MEMORY_TEMPLATE, "id"): "memories",
}
_ID = re.compile(ID_PATTERN)


def target(params: CompleteRequestParams) -> str:
    """ "sessions" or "memories"; an unknown prompt, template or argument is invalid params."""
    ref = params.ref
    prompt = isinstance(ref, PromptReference)
    named = ref.name if isinstance(ref, PromptReference) else ref.uri
    arg = params.argument.name
    found = TARGETS.get((named, arg))
    if found is not None:
        return found
    known = {n for n, _ in TARGETS}
    if named not in known:
        what = "prompt" if prompt else "resource template"
        names = dict.fromkeys(n for n, _ in TARGETS)
        choices = ", ".join(n for n in names if (n in prompts.NAMES) == prompt)
        log.info("completion/complete: no %s %r", what, seg(named))
        raise invalid(f"[not_found] no {what} '{seg(named)}' to complete; {what}s: {choices}")
    takes = ", ".join(a for n, a in TARGETS if n == named)
    raise invalid(
        f"[invalid_input] '{seg(named)}' has no argument '{seg(arg)}' to complete; it takes {takes}"
    )


def could_be_id(value: str, max_length: int) -> bool:
    """Some id could start with `value` (the empty prefix included)."""
    return value == "" or (len(value) <= max_length and _ID.match(value) is not None)


async def complete(ctx: ServerRequestContext[Any, Any], params: CompleteRequestParams) -> CompleteResult:
    kind = target(params)
    prefix = params.argument.value

    async def body() -> CompleteResult:
        state, principal = await caller(ctx)
        if not could_be_id(prefix, state.settings.memory.max_id_length):
            return CompleteResult(completion=Completion(values=[], total=0, has_more=False))
        if kind == "sessions":
            tenant = conversations_of(state.settings, principal).stored_tenant
            values, more = await state.session_ids.complete(tenant, prefix, MAX_VALUES)
        else:
            long_term = state.settings.memory.long_term
            state.require_scopes(principal, list(long_term.required_scopes), "completion/complete memory")
            scope = scope_for(long_term.scope, principal.tenant, principal.identity)
            values, more = await memory_ids(state.recall, scope, prefix, MAX_VALUES)
        total = None if more else len(values)
        return CompleteResult(completion=Completion(values=values, total=total, has_more=more))

    return await answered(f"completion/complete {kind}", body)
