"""A row of many terms (a long message or memory of distinct words): a ranking tells which query
words it holds through a set built once (not a scan of its terms per word), and the set's bytes
are counted against the index budget while the row is held."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from mongogate.indexing import Entry, Ranked, ScopeIndex
from mongogate.indexing.scope_index import SCAN

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def entry(mid: str, terms: list[str]) -> Entry:
    return Entry(mid, dict.fromkeys(terms, 1), None, {"_id": mid})


def test_a_long_rows_matched_words_come_from_a_set_counted_in_its_bytes() -> None:
    idx = ScopeIndex("m", 4, 0, distinct_words=False)
    long_terms = [f"w{i}" for i in range(30_000)]
    idx.add(entry("long", long_terms))
    idx.add(entry("short", ["w1", "garden"]))
    before = idx.nbytes()
    ranked = {r.id: r.matched for r in _rank(idx, ["w1", "w29999", "absent"])}
    assert ranked == {"long": frozenset({"w1", "w29999"}), "short": frozenset({"w1"})}
    long_row = idx.rows[idx.where["long"]]
    assert long_row.lookup is not None and long_row.holds("w29999") and not long_row.holds("absent")
    assert idx.rows[idx.where["short"]].lookup is None  # SCAN terms or fewer: the tuple
    assert len(idx.rows[idx.where["short"]].names) <= SCAN
    grown = idx.nbytes() - before
    assert grown >= 30_000 * 8  # the set: at least a pointer a term
    assert _rank(idx, ["w1"])
    assert idx.nbytes() - before == grown  # built once
    idx.remove("long")
    assert idx.lookup_bytes == 0


def _rank(idx: ScopeIndex, words: list[str]) -> Sequence[Ranked]:
    return idx.rank(
        None, words, now=NOW, ns_path=None, metadata={}, depth=5, weight_text=1.0, weight_vector=0.0
    )
