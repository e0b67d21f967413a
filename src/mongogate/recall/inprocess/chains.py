"""Supersession and time on the in-process index: which rows are replaced (`recall/chain.py`'s rule
on the rows' links), which fall in a recall's time window, and the newer memories very close in
meaning to a row (`similar_to`, `newer_similar`).

The links come from the rows alone: the newer row's `supersedes` (held by `Rows.replacers`, by
the memory it replaces) and the older row's `superseded_by` ids (`Chain.hints`). A newer row the
index does not hold (forgotten) or whose expiry has passed replaces nothing, so the rule needs no
read. Results for the current time are kept until a row changes or a newer row's expiry passes.

Similarity is the cosine of two memories' vectors (the embedding model's, unit length): one
matrix-vector product for a remember's notice (`similar_to`), and for a recall's marks a product
with the `POOL` rows closest in meaning to the question only (`newer_similar`): a memory very close
to a returned one is close to the question too, and the pool's product costs less than half the
one over every row at 10,000 memories (benchmarks/RESULTS.md, "similar facts").
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from mongogate.clock import as_utc
from mongogate.lazy import lazy
from mongogate.recall.chain import SIMILAR_TEXT_CHARS, holds
from mongogate.recall.inprocess.rows import Rows
from mongogate.recall.model import Link, Similar
from mongogate.recall.scope_filter import RecallFilter
from mongogate.values import clip

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Mask = npt.NDArray[np.bool_]
else:
    np = lazy("numpy")

#: rows a recall's marks compare each returned memory with: the closest to the question in meaning
POOL = 256

Chained = dict[int, tuple[Link, ...]]


def replaced(rows: Rows, now: datetime, as_of: datetime | None = None) -> Chained:
    """Row -> the links that replace it (oldest first), for every replaced row: at `now`, or as
    of `as_of` (memories live now, the newer one created by then)."""
    now_ts = as_utc(now).timestamp()
    if as_of is None and rows.chain_cache is not None:
        mutations, until, kept = rows.chain_cache
        if mutations == rows.mutations and now_ts < until:
            return kept
    out: Chained = {}
    until = np.inf
    for older, by in rows.replacers.items():
        at = rows.where.get(older)
        if at is None:
            continue
        links, expiry = _holding(rows, at, by, now_ts, as_of)
        until = min(until, expiry)
        if links:
            out[at] = links
    if as_of is None:
        rows.chain_cache = (rows.mutations, float(until), out)
    return out


def _holding(
    rows: Rows, at: int, by: dict[str, datetime], now_ts: float, as_of: datetime | None
) -> tuple[tuple[Link, ...], float]:
    """The links of `by` (newer id -> when) that replace row `at`, and the first expiry (after now)
    of a newer row they depend on (the result holds until then)."""
    mid = rows.rows[at].id
    chain = rows.chain[mid]
    links: list[Link] = []
    until = np.inf
    for newer, when in by.items():
        j = rows.where.get(newer)
        if j is None or newer == mid or newer not in chain.hints:
            continue
        expiry = float(rows.expiries[j])
        if expiry <= now_ts:
            continue
        until = min(until, expiry)
        created = rows.chain[newer].created
        if as_of is not None and (created is None or created > as_of):
            continue
        if holds(when, chain.stated_at, as_of):
            links.append(Link(newer, when))
    return tuple(sorted(links, key=lambda link: (link.at, link.id))), float(until)


def window(rows: Rows, filt: RecallFilter | None) -> Mask | None:
    """The rows in the filter's time window (occurred_at in range, created by `as_of`); None:
    no window asked for."""
    if filt is None or (filt.as_of is None and filt.occurred_after is None and filt.occurred_before is None):
        return None
    n = len(rows.rows)
    out: Mask = np.ones(n, dtype=np.bool_)
    occurred = rows.occurred[:n]
    if filt.occurred_after is not None:
        out &= occurred >= filt.occurred_after.timestamp()  # nan compares False: left out
    if filt.occurred_before is not None:
        out &= occurred < filt.occurred_before.timestamp()
    if filt.as_of is not None:
        out &= rows.created[:n] <= filt.as_of.timestamp()
    return out


def current(rows: Rows, now: datetime, chained: Chained) -> Mask:
    """Live rows that nothing replaces (what a newer sibling may be)."""
    n = len(rows.rows)
    out: Mask = rows.expiries[:n] > as_utc(now).timestamp()
    if chained:
        out[list(chained)] = False
    return out


def _unit(vector: list[float] | npt.NDArray[np.float32]) -> npt.NDArray[np.float32] | None:
    q = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(q))
    return q / norm if np.isfinite(norm) and norm > 0 else None


def similar_to(
    rows: Rows, vector: list[float], *, now: datetime, exclude: set[str], min_score: float, limit: int
) -> list[Similar]:
    """The current rows (not in `exclude`) whose cosine with `vector` is at least `min_score`,
    closest first (ties by id), at most `limit`: a remember's notice."""
    n = len(rows.rows)
    q = _unit(vector)
    if n == 0 or q is None:
        return []
    cos = rows.matrix[:n] @ q
    ok = current(rows, now, replaced(rows, now)) & (cos >= min_score)
    held = rows.rows
    found = [i for i in np.flatnonzero(ok).tolist() if held[i].has_vector and held[i].id not in exclude]
    found.sort(key=lambda i: (-float(cos[i]), held[i].id))
    return [_similar(rows, i, float(cos[i])) for i in found[:limit]]


def newer_similar(
    rows: Rows,
    kept: list[int],
    sims: npt.NDArray[np.float32],
    now: datetime,
    chained: Chained,
    min_score: float,
) -> dict[int, Similar]:
    """For each kept row, the current row closest to it in meaning whose text was written after
    its own (updated_at) and whose cosine with it is at least `min_score`, among the `POOL` rows
    closest to the question (`sims`, the question's cosines)."""
    n = len(rows.rows)
    kept = [i for i in kept if rows.rows[i].has_vector]
    if not kept or n < 2:
        return {}
    pool = np.argpartition(-sims, POOL - 1)[:POOL] if n > POOL else np.arange(n)
    pool = pool[current(rows, now, chained)[pool]]
    if pool.size == 0:
        return {}
    cos = rows.matrix[pool] @ rows.matrix[kept].T  # (pool, kept)
    out: dict[int, Similar] = {}
    for c, i in enumerate(kept):
        ok = (cos[:, c] >= min_score) & (rows.updated[pool] > rows.updated[i]) & (pool != i)
        if ok.any():
            best = max(np.flatnonzero(ok).tolist(), key=lambda k: (float(cos[k, c]), rows.rows[pool[k]].id))
            out[i] = Similar(rows.rows[int(pool[best])].id, round(float(cos[best, c]), 6))
    return out


def _similar(rows: Rows, i: int, score: float) -> Similar:
    text = str(rows.rows[i].item.get("text") or "")
    return Similar(rows.rows[i].id, round(score, 6), clip(text, SIMILAR_TEXT_CHARS))
