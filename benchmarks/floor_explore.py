"""Score rules for the floor explored on branch floor2 (issue 26 item 4), beside the rule in force:
the same cases, floor chooser and report as `recall_quality.py`'s floor table, plus what the
new rules need (the k-th best fused score of the same ranking, the best match's cosine and its
share of the query's idf).

    python benchmarks/floor_explore.py             # prints the table (writes nothing)
    python benchmarks/floor_explore.py --cases     # and every question's features

Each rule's shown score is `0.9 x L + 0.1 x own` for a recall-level `L` (the rule), so the order is
the fused order. Floors: the highest (steps of 0.005) at which neither tuning half loses more than
3 points of hit@10 nor the conversation set's more than 3 of ev@10; parameters of a rule (gate
thresholds, regularisation) chosen on the tuning halves only, by the share of the conversation
set's tuning-half unrelated questions emptied (ties: the loosest). The 12 unrelated texts are the
same in every unrelated set (asked of other scopes), so a parameter chosen on the tuning half's
unrelated questions has seen the held-out ones' texts: a weak held-out.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from conv_eval import docs_of
from lib import recall_set
from lib.convset import build
from recall_quality import UNRELATED, at_floor, cached, index_of, ranked, tuned_floor

from mongogate.recall.embedding import LOCAL_DIMENSIONS, LOCAL_MODEL, LocalEmbedder
from mongogate.recall.inprocess.scope_index import ScopeIndex
from mongogate.textrank import query_tokens


class Feat:
    """One question's ranked list (30 deep; the top 10 is what is scored) and its features."""

    def __init__(self, q: str, want: set[str] | None, idx: ScopeIndex, vec: list[float]) -> None:
        self.q, self.want = q, want
        #: 30 deep (the k-th best scores); `got`, its top 10, is what a rule scores
        self.deep = ranked(idx, q, vec, depth=30)
        self.got = self.deep[:10]
        n = len(idx)
        qv = np.asarray(vec, dtype=np.float32)
        self.maxcos = float((idx.matrix[:n] @ (qv / np.linalg.norm(qv))).max())
        toks = list(dict.fromkeys(query_tokens(q)))
        idf = {t: idx.idf(t) for t in toks}
        total = sum(idf.values()) or 1.0
        #: the share of the query's idf each ranked memory holds (its distinct query tokens)
        self.share = [sum(idf[t] for t in r.matched) / total for r in self.deep]
        held: npt.NDArray[np.float64] = np.zeros(n, dtype=np.float64)
        for t in toks:
            for at in idx.postings.get(t, {}):
                held[at] += idf[t]
        #: the highest share any memory of the scope holds
        self.maxshare = float(np.max(held)) / total
        self.best = self.deep[0].fused if self.deep else 0.0
        self.kth = {k: (self.deep[k - 1].fused if len(self.deep) >= k else 0.0) for k in (5, 10, 20)}
        self.cos0 = self.deep[0].similarity if self.deep else 0.0
        self.text0 = self.deep[0].text if self.deep else 0.0
        self.hit = None if want is None else next((i for i, r in enumerate(self.got) if r.id in want), None)


def features() -> dict[str, list[Feat]]:
    embed = cached(LocalEmbedder().embed_sync)
    model, dims = LOCAL_MODEL, LOCAL_DIMENSIONS
    out: dict[str, list[Feat]] = {}
    idx = index_of(recall_set.FACTS, embed, model, dims)
    for half in recall_set.HALVES:
        qs = recall_set.split(half)
        vecs = embed([q for _, q, _ in qs])
        out[f"rs {half}"] = [Feat(q, {w}, idx, v) for (_, q, w), v in zip(qs, vecs, strict=True)]
    un = embed(UNRELATED)
    out["rs unrelated"] = [Feat(q, None, idx, v) for q, v in zip(UNRELATED, un, strict=True)]
    for c in build():
        half = "tuning" if c.tuning else "held-out"
        cidx = index_of([(d.id, d.text) for d in docs_of(c)], embed, model, dims)
        vecs = embed([q.text for q in c.questions])
        out.setdefault(f"cv {half}", []).extend(
            Feat(q.text, set(q.evidence), cidx, v) for q, v in zip(c.questions, vecs, strict=True)
        )
        out.setdefault(f"cv unrelated {half}", []).extend(
            Feat(q, None, cidx, v) for q, v in zip(UNRELATED, un, strict=True)
        )
    return out


D: dict[str, list[Feat]] = {}
Rule = Callable[[Feat], list[float]]


def shown(f: Feat, level: float) -> list[float]:
    return [min(1.0, max(0.0, 0.9 * level + 0.1 * r.fused)) for r in f.got]


def tuned(rule: Rule) -> float:
    return tuned_floor(D, rule, highest=0.8)


def emptied_tuning(rule: Rule) -> float:
    return at_floor(D["cv unrelated tuning"], rule, tuned(rule))[0]


def row(name: str, rule: Rule) -> str:
    f = tuned(rule)
    rs0, rs = at_floor(D["rs held-out"], rule, 0), at_floor(D["rs held-out"], rule, f)
    cv0, cv = at_floor(D["cv held-out"], rule, 0), at_floor(D["cv held-out"], rule, f)
    keys = ("rs unrelated", "cv unrelated tuning", "cv unrelated held-out")
    un = [at_floor(D[k], rule, f)[0] for k in keys]
    ok = rs[0] >= rs0[0] - 3 and cv[0] >= cv0[0] - 3 and cv[1] >= cv0[1] - 3
    return (
        f"  {name:<50} {f:5.3f} | {rs[0]:5.1f} ({rs0[0]:5.1f}) {un[0]:5.1f}%"
        f" | {cv[0]:5.1f} {cv[1]:5.1f} ({cv0[0]:5.1f} {cv0[1]:5.1f}) {un[1]:5.1f}% / {un[2]:5.1f}%"
        + ("" if ok else "  held-out loses > 3")
    )


def margin(k: int, lam: float) -> Rule:
    return lambda f: shown(f, max(0.0, f.best - lam * f.kth[k])) if f.got else []


def relative(k: int, p: float) -> Rule:
    return lambda f: shown(f, f.best * max(0.0, 1 - f.kth[k] / f.best) ** p) if f.got and f.best > 0 else []


def gate(cos: float, share: float, where: str = "best") -> Rule:
    """The current rule if the best match (`where` "top10": any of the top 10 for the share, any
    memory for the cosine; "scope": any memory of the scope for both) has a cosine of at least
    `cos` or holds `share` of the query's idf; else L = 0."""

    def rule(f: Feat) -> list[float]:
        if not f.got:
            return []
        c, s = {
            "best": (f.cos0, f.share[0]),
            "top10": (f.maxcos, max(f.share[:10])),
            "scope": (f.maxcos, f.maxshare),
        }[where]
        return shown(f, f.best if c >= cos or s >= share else 0.0)

    return rule


def soft(cos: float, share: float, p: float) -> Rule:
    """best x min(1, max(cos0 / cos, share0 / share)) ** p."""
    return lambda f: shown(f, f.best * min(1.0, max(f.cos0 / cos, f.share[0] / share)) ** p) if f.got else []


def x_of(f: Feat) -> npt.NDArray[np.float64]:
    return np.array([1.0, f.cos0, f.text0, f.share[0], f.best - f.kth[10], f.best])


def logistic(lam: float) -> Rule:
    """L = P(answerable) of an L2 logistic over (cos0, text0, share0, best - 10th, best), fit on
    the tuning halves (answerable questions with an answer in the top 10; the conversation set's
    tuning-half unrelated ones); each unrelated question is scored by a fit without its text."""
    pos = [f for k in ("rs tuning", "cv tuning") for f in D[k] if f.hit is not None and f.got]
    neg = [f for f in D["cv unrelated tuning"] if f.got]
    x = np.array([x_of(f) for f in pos + neg])
    y = np.r_[np.ones(len(pos)), np.zeros(len(neg))]

    def fit(keep: list[int]) -> Callable[[Feat], float]:
        xs, ys = x[keep], y[keep]
        mu, sd = xs[:, 1:].mean(0), xs[:, 1:].std(0) + 1e-9
        z = np.hstack([xs[:, :1], (xs[:, 1:] - mu) / sd])
        w = np.zeros(z.shape[1])
        reg = np.eye(len(w)) * lam
        reg[0, 0] = 0.0
        for _ in range(50):
            p = 1 / (1 + np.exp(-z @ w))
            hess = z.T @ (z * (p * (1 - p))[:, None]) + reg + 1e-9 * np.eye(len(w))
            w -= np.linalg.solve(hess, z.T @ (p - ys) + reg @ w)
        return lambda f: float(1 / (1 + np.exp(-np.r_[1.0, (x_of(f)[1:] - mu) / sd] @ w)))

    every = list(range(len(pos) + len(neg)))
    full = fit(every)
    loo = {q: fit([i for i in every if i < len(pos) or neg[i - len(pos)].q != q]) for q in {f.q for f in neg}}
    return lambda f: shown(f, (full if f.want is not None else loo.get(f.q, full))(f)) if f.got else []


def best_of(make: Callable[..., Rule], grid: Sequence[tuple[float, ...]]) -> tuple[tuple[float, ...], Rule]:
    """The grid point emptying most tuning-half unrelated questions (ties: the first, the loosest)."""
    scored = [(emptied_tuning(make(*g)), -i, g) for i, g in enumerate(grid)]
    _, _, g = max(scored)
    return g, make(*g)


def main() -> None:
    D.update(features())
    print(
        "rule | floor | recall_set held-out hit@10 (no floor), unrelated emptied"
        " | convset held-out hit@10 ev@10 (no floor), unrelated emptied tuning / held-out"
    )
    print(row("0.9 best + 0.1 own (in force on main)", lambda f: shown(f, f.best) if f.got else []))
    for k in (5, 10, 20):
        for lam in (0.5, 1.0):
            print(row(f"margin: best - {lam} x {k}th best", margin(k, lam)))
        for p in (0.5, 1.0):
            print(row(f"margin: best x (1 - {k}th / best)^{p}", relative(k, p)))
    cuts = [0.15, 0.175, 0.2, 0.225, 0.25, 0.275]
    grid = [(c, s) for s in cuts for c in cuts]
    for where in ("best", "top10", "scope"):
        g, rule = best_of(lambda c, s, w=where: gate(c, s, w), grid)
        print(row(f"gate ({where}): cos >= {g[0]} or share >= {g[1]}", rule))
    for w, c, s in [("best", 0.175, 0.15), ("best", 0.25, 0.15), ("best", 0.2, 0.2), ("best", 0.15, 0.15)]:
        print(row(f"  gate ({w}): cos >= {c} or share >= {s}", gate(c, s, w)))
    for c in cuts:
        for s in cuts:
            print(row(f"  gate (scope): cos >= {c} or share >= {s}", gate(c, s, "scope")))
    g, rule = best_of(soft, [(c, s, p) for p in (1.0, 2.0, 4.0) for c in cuts for s in cuts])
    print(row(f"soft: best x min(1, max(cos/{g[0]}, share/{g[1]}))^{g[2]}", rule))
    for lam in (1.0, 10.0, 100.0):
        print(row(f"logistic, L2 {lam}, unrelated scored leave-one-text-out", logistic(lam)))
    if "--cases" in sys.argv:
        for key, fs in D.items():
            print(f"== {key}")
            for f in sorted(fs, key=lambda f: f.best):
                print(
                    f"  best {f.best:.3f} 5th {f.kth[5]:.3f} 10th {f.kth[10]:.3f} 20th {f.kth[20]:.3f}"
                    f" cos {f.cos0:.3f} maxcos {f.maxcos:.3f} text {f.text0:.3f} share {f.share[0]:.2f}"
                    f" maxshare {f.maxshare:.2f}"
                    f" hit {f.hit}  {f.q[:60]}"
                )


if __name__ == "__main__":
    main()
