"""Supersession without a model: `remember(..., supersedes=...)` states that a new memory replaces
older ones of the same scope, and every reader decides from the stored documents alone, the same
way (docs/decisions/recall-supersession.md).

A link is two halves, each a map entry on its own document, written in this order in the scope's
`writing` block (`recall/coherence.py`) and bumped together:

1. the newer memory's `supersedes.<older id>`: when it was stated (the truth);
2. the older memory's `superseded_by.<newer id>`: the same time (what a reader of the older
   document alone finds, and checks against the newer one).

`holds` says whether a link replaces the older memory: both halves present, the newer memory
stored and live (not forgotten, not expired: then the older one is current again), another
memory than the older one, and stated after the older one was last **stated current**
(`stated_at`: a new version of its text, or a remember of it naming what it replaces). So
stating an old fact again (`remember("Alice lives in Paris", supersedes=<Berlin>)`) makes it
current and the newer one replaced, and a cycle never hides every memory of it: the latest
statement wins. A plain remember of a replaced text (`unchanged`, or a retry) states nothing.

`as_of` asks what was current then: memories created by then, and links stated by then whose
newer memory existed by then; a memory stated current again after `as_of` counts as not stated
before it (only the last statement is kept, so a memory restated twice after `as_of` may show
as replaced where it was current for a while: docs/long-term-memory.md, "Limits known").
"""

from __future__ import annotations

from datetime import datetime

__all__ = ["MAX_LINKS", "MAX_SUPERSEDES", "SIMILAR_MAX", "SIMILAR_TEXT_CHARS", "holds", "stated_before"]

#: memories one remember may name in `supersedes`
MAX_SUPERSEDES = 10
#: links one memory may hold on either side (what it replaces, what replaces it)
MAX_LINKS = 100
#: similar memories one remember lists, and the characters of each text it shows
SIMILAR_MAX = 3
SIMILAR_TEXT_CHARS = 300


def stated_before(stated_at: datetime | None, as_of: datetime | None) -> datetime | None:
    """When the older memory was last stated current, as seen at `as_of`: a statement after
    `as_of` had not happened then (and the one before it is not kept: taken as none)."""
    if as_of is not None and stated_at is not None and stated_at > as_of:
        return None
    return stated_at


def holds(at: datetime, stated_at: datetime | None, as_of: datetime | None = None) -> bool:
    """A link stated `at` replaces a memory last stated current at `stated_at` (None: never):
    stated later than it, and by `as_of` when one is asked. The caller checks the rest (both
    halves, the newer memory live and another one, created by `as_of`)."""
    if as_of is not None and at > as_of:
        return False
    last = stated_before(stated_at, as_of)
    return last is None or at > last
