"""The index's ranking computed fast is the ranking as written: the cached posting arrays and the
expiry array give exactly (==) the scores, order and filters of a plain recomputation from the
rows, through puts, updates and removals that change the cached postings."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from mongogate.recall.inprocess.scope_index import K1, B, ScopeIndex
from mongogate.textrank import query_tokens

NOW = datetime(2030, 1, 1, tzinfo=UTC)
WORDS = [
    "invoice",
    "garden",
    "cat",
    "server",
    "deploy",
    "budget",
    "flight",
    "hotel",
    "dentist",
    "report",
    "due",
    "order",
    "refund",
]


def doc(i: int, rng: random.Random, dims: int) -> dict[str, Any]:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9)))
    expires = [None, NOW - timedelta(days=1), NOW + timedelta(days=1)][rng.randint(0, 2)]
    return {
        "_id": f"m{i:04d}",
        "text": f"{words} ref R-{i}",
        "embedding": None,
        "ns_path": ["a"] if i % 2 else ["b"],
        "metadata": {"n": i % 3},
        "expires_at": expires,
        "namespace": "a" if i % 2 else "b",
        "version": 1,
    }


def plain_text_scores(idx: ScopeIndex, qt: list[str]) -> list[float]:
    """BM25 over the query as `scope_index.py` defines it, row by row from the rows alone."""
    n = len(idx.rows)
    avg = (sum(r.length for r in idx.rows) / n) or 1.0
    out = np.zeros(n, dtype=np.float64)
    upper = 0.0
    for term in qt:
        holders = [i for i, r in enumerate(idx.rows) if term in r.terms]
        df = len(holders)
        idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
        upper += idf
        for i in sorted(holders, key=lambda i: list(idx.postings[term]).index(i)):  # the posting's order
            tf = float(idx.rows[i].terms[term])
            norm = K1 * (1.0 - B + B * idx.rows[i].length / avg)
            out[i] += idf * tf * (K1 + 1.0) / (tf + norm)
    if upper > 0:
        out = np.minimum(out / upper, 1.0)
    return [float(x) for x in out]


def test_fast_ranking_equals_the_plain_computation_through_changes() -> None:
    rng = random.Random(26)
    idx = ScopeIndex("m", 8, 0)
    live: list[int] = []
    for step in range(400):
        if live and rng.random() < 0.3:
            idx.remove(f"m{live.pop(rng.randrange(len(live))):04d}")
        else:
            i = rng.randrange(300)  # a put of a held id is an update
            idx.put(doc(i, rng, 8))
            if i not in live:
                live.append(i)
        if step % 25 == 0 and len(idx):
            for question in ("invoice due", "garden cat refund", "R-17 report", "nothing matches zzz"):
                qt = query_tokens(question)
                expected = plain_text_scores(idx, qt)
                for ns, meta in ((None, {}), ("a", {}), (None, {"n": 1})):
                    got = idx.rank(
                        None,
                        qt,
                        now=NOW,
                        ns_path=ns,
                        metadata=meta,
                        depth=len(idx),
                        weight_text=1.0,
                        weight_vector=0.0,
                    )
                    usable = [
                        r
                        for r in idx.rows
                        if (r.expires_at is None or r.expires_at > NOW)
                        and (ns is None or ns in r.ns_path)
                        and all(r.metadata.get(k) == v for k, v in meta.items())
                    ]
                    assert {g.id for g in got} == {r.id for r in usable}
                    at = {r.id: i for i, r in enumerate(idx.rows)}
                    assert [g.text for g in got] == [expected[at[g.id]] for g in got]  # exactly equal
                    # best first by the fused score (a hop from the best match can lift a memory
                    # above its own text score: recall/fusion.py), ties by id
                    fused = {g.id: g.score for g in got}
                    assert [g.id for g in got] == sorted(fused, key=lambda m: (-fused[m], m))
                    assert all(g.score >= min(expected[at[g.id]], 1.0) - 1e-12 for g in got)
