"""A message's terms as message search holds and stores them: each distinct token of its whole text
(`textrank.tokens`: folded, stemmed, stop words dropped, identifiers whole) with its count.

Stored in the message's `message_index` document (`documents.MessageIndexDoc`) as one string of
the distinct tokens joined by a space (a token never holds whitespace) and their counts as
little-endian uint32: an index rebuilt later (another process, a restart, an eviction) reads them
instead of tokenizing the text again. They take at most as many bytes as a message may
(`memory.max_message_bytes`), the distinct tokens kept in the order they first occur: only a text
of almost nothing but distinct tokens reaches it (its later tokens are then not searchable).

Tokenizing costs about half a microsecond per character once the stemmer's cache is warm, so a
text longer than `THREAD_CHARS` is tokenized in a worker thread (`terms_of_async`): the event
loop, which serves every tenant, is never held for the 0.1-0.3 s of a 256 KiB message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING

import anyio

from mongogate.clock import utc_or_none
from mongogate.lazy import lazy
from mongogate.memory import documents as md
from mongogate.textrank import tokens
from mongogate.values import Doc

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy("numpy")

__all__ = [
    "TERMS_VERSION",
    "THREAD_CHARS",
    "encoded",
    "of_message",
    "stored_terms",
    "terms_of",
    "terms_of_async",
]

#: the tokenizer's version (`textrank.py`): stored terms of another are taken again from the text
TERMS_VERSION = 1
#: texts longer than this are tokenized in a worker thread
THREAD_CHARS = 8192


def terms_of(text: str, max_bytes: int) -> Counter[str]:
    """Each token of `text` and how often it occurs: the distinct ones whose stored form
    (`encoded`: the token, a space, a 4-byte count) fits `max_bytes`, in the order they occur."""
    counts = Counter(tokens(text))
    size = 0
    for i, term in enumerate(counts):
        size += len(term.encode("utf-8")) + 5
        if size > max_bytes:
            return Counter(dict(list(counts.items())[:i]))
    return counts


async def terms_of_async(text: str, max_bytes: int) -> Counter[str]:
    """`terms_of`, in a worker thread when the text is long."""
    if len(text) <= THREAD_CHARS:
        return terms_of(text, max_bytes)
    return await anyio.to_thread.run_sync(terms_of, text, max_bytes)


def encoded(terms: Mapping[str, int]) -> Doc:
    """The stored form of `terms`: the `terms`, `tf` and `terms_v` fields of a `MessageIndexDoc`."""
    counts = np.fromiter(terms.values(), dtype="<u4", count=len(terms))
    return {md.TERMS: " ".join(terms), md.TERM_COUNTS: counts.tobytes(), md.TERMS_V: TERMS_VERSION}


def stored_terms(doc: Mapping[str, object]) -> dict[str, int] | None:
    """The terms a `message_index` document holds; None when it holds none of this tokenizer's
    version, or they do not read back (then they are taken again from the text)."""
    if doc.get(md.TERMS_V) != TERMS_VERSION:
        return None
    text, raw = doc.get(md.TERMS), doc.get(md.TERM_COUNTS)
    if not isinstance(text, str) or not isinstance(raw, bytes):
        return None
    names = text.split(" ") if text else []
    if len(raw) != 4 * len(names):
        return None
    counts = np.frombuffer(raw, dtype="<u4").tolist()
    return dict(zip(names, counts, strict=True))


def of_message(derived: Mapping[str, object], message: Mapping[str, object]) -> bool:
    """Whether `derived` (a `message_index` document) was derived from `message` (the message of
    its `_id`) and not from an earlier message of the same `_id`: a derivation that landed after
    its message was erased (a clear racing it), when a new message took the id (the OpenAI
    Agents session's items start again at the same ids), is another message's. Told apart by the
    tenant and the `created_at` the derivation copied (to the millisecond:
    docs/decisions/message-search.md)."""
    created = utc_or_none(message.get("created_at"))
    return (
        created is not None
        and derived.get(md.TENANT) == message.get(md.TENANT)
        and utc_or_none(derived.get("created_at")) == created
    )
