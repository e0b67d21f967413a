"""The threshold from which a new memory "may replace" an older one (`similar_min_score`, issue 39
item 2): remember lists older memories at least this close in meaning (`similar`), recall marks a
memory with a newer one this close (`newer_similar`).

The set is benchmarks/data/similar_pairs.jsonl, written by hand before any score was computed:
pairs (older, newer) labelled `update` (the newer text is a later value of the same fact: "Alice
lives in Paris." / "Alice moved to Berlin in March.") or `related` (same topic, a different fact:
"Alice lives in Paris." / "Alice's sister lives in Lyon."; topic `parallel`: the same sentence
shape about another person or thing). A notice is "positive" when the cosine of the two texts'
vectors (the default model, unit length: what `recall/inprocess/chains.py` computes) is at least
the threshold. Precision: the share of noticed pairs that are updates; recall: the share of
updates noticed. The threshold is chosen on the tuning half (even lines) as the best F1 among
those that notice few unrelated memories (`strangers`: the other pairs' older texts a new text
is that close to, `--max-strangers` per remember), and reported on the held-out half (odd lines).
Without that bound the best F1 is lower (0.50-0.55 on this set), at several times the strangers.

Cost: the marks compare each returned memory with the `POOL` rows closest to the question rather
than every row; the two matrix products are timed here at 10,000 memories, interleaved.

    python benchmarks/similar_facts.py              # prints and writes its RESULTS.md section
    python benchmarks/similar_facts.py --no-write
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lib.results import command_line, parser, publish

from mongogate.config_memory import LongTermSettings
from mongogate.recall.embedding import LOCAL_DIMENSIONS, LOCAL_MODEL, LocalEmbedder
from mongogate.recall.inprocess.chains import POOL

PAIRS = Path(__file__).resolve().parent / "data" / "similar_pairs.jsonl"
THRESHOLDS = [round(t, 2) for t in np.arange(0.40, 0.91, 0.05)]


def load() -> list[dict[str, str]]:
    return [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]


def vectors(texts: list[str]) -> np.ndarray:
    v = np.asarray(LocalEmbedder().embed_sync(texts), dtype=np.float32)
    return np.asarray(v / np.linalg.norm(v, axis=1, keepdims=True))


def strangers(a: np.ndarray, b: np.ndarray, older: list[str], th: float) -> float:
    """Mean count of other pairs' older texts (a different text) at least `th` close to a newer
    text: the notices a remember gets from unrelated memories in a scope holding every older text."""
    cross = b @ a.T
    n = len(older)
    other = np.array([[older[j] != older[i] for j in range(n)] for i in range(n)])
    return float(((cross >= th) & other).sum(axis=1).mean())


def pr(cos: np.ndarray, update: np.ndarray, th: float) -> tuple[float, float, int]:
    shown = cos >= th
    tp = int((shown & update).sum())
    precision = tp / int(shown.sum()) if shown.any() else 1.0
    return precision, tp / max(1, int(update.sum())), int(shown.sum())


def f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def choose(cos: np.ndarray, update: np.ndarray, stranger: dict[float, float], most: float) -> float:
    """The threshold of the best F1 (the lower one on a tie) among those noticing at most `most`
    unrelated memories per remember."""
    ok = [th for th in THRESHOLDS if stranger[th] <= most] or THRESHOLDS[-1:]
    return max(ok, key=lambda th: (round(f1(*pr(cos, update, th)[:2]), 3), -th))


def cost(rounds: int) -> tuple[float, float]:
    """Median ms of the marks' product over every row and over the pool (10 returned memories,
    10,000 rows), interleaved."""
    rng = np.random.default_rng(7)
    m = rng.standard_normal((10_000, LOCAL_DIMENSIONS)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    kept = list(range(10))
    q = m[123]
    full, pooled = [], []
    for _ in range(rounds):
        t = time.perf_counter()
        _ = m @ m[kept].T
        full.append(time.perf_counter() - t)
        t = time.perf_counter()
        sims = m @ q
        pool = np.argpartition(-sims, POOL - 1)[:POOL]
        _ = m[pool] @ m[kept].T
        pooled.append(time.perf_counter() - t)
    return float(np.median(full) * 1e3), float(np.median(pooled) * 1e3)


def main(argv: list[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--max-strangers", type=float, default=0.05)
    args = p.parse_args(argv)
    pairs = load()
    older = [x["older"] for x in pairs]
    a, b = vectors(older), vectors([x["newer"] for x in pairs])
    cos = np.asarray((a * b).sum(axis=1))
    update = np.array([x["label"] == "update" for x in pairs])
    parallel = np.array([x.get("topic") == "parallel" for x in pairs])
    idx = np.arange(len(pairs))
    tune, held = idx % 2 == 0, idx % 2 == 1
    stranger = {th: strangers(a, b, older, th) for th in THRESHOLDS}
    chosen = choose(cos[tune], update[tune], stranger, args.max_strangers)
    default = LongTermSettings().similar_min_score
    full_ms, pool_ms = cost(args.rounds)
    rows = []
    for th in THRESHOLDS:
        cells = []
        for half in (tune, held):
            pr_, rc, n = pr(cos[half], update[half], th)
            cells.append(f"{pr_:.2f} / {rc:.2f} / {f1(pr_, rc):.2f} ({n})")
        mark = " (default)" if abs(th - default) < 1e-9 else ""
        rows.append(f"| {th:.2f}{mark} | {cells[0]} | {cells[1]} | {stranger[th]:.2f} |")
    load_avg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    body = "\n".join(
        [
            f"`{command_line('similar_facts.py', argv)}` (load average {load_avg}; model {LOCAL_MODEL})",
            "",
            f"{len(pairs)} hand-written pairs (benchmarks/data/similar_pairs.jsonl): {int(update.sum())} "
            f"updates, {int((~update).sum())} merely related ({int(parallel.sum())} of them the same "
            "sentence shape about another person or thing). Cosine of the two texts' vectors; "
            "precision / recall / F1 of `cosine >= threshold` as a notice of an update (pairs noticed). "
            "Tuning half: even lines; held out: odd lines. Strangers: the mean count of other pairs' "
            "older texts a newer text is that close to (the notices a remember would carry from "
            f"unrelated memories in a scope holding all {len(pairs)} older texts; a reply lists at "
            "most 3).",
            "",
            "| threshold | tuning: P / R / F1 (noticed) | held out: P / R / F1 (noticed) | strangers |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Mean cosine: updates {cos[update].mean():.3f}, related {cos[~update & ~parallel].mean():.3f}, "
            f"parallel {cos[parallel].mean():.3f}.",
            f"Best F1 on the tuning half among thresholds with at most {args.max_strangers:.2f} strangers "
            f"(they grow with the scope: 0.1 per remember at "
            f"{len(pairs)} memories is about 4 at 10,000): {chosen:.2f}; "
            f"the default `memory.long_term.similar_min_score` is {default:.2f}.",
            "",
            f"Cost of recall's marks, 10 memories returned, 10,000 rows, median of {args.rounds} "
            f"interleaved rounds: every row {full_ms:.2f} ms, the {POOL}-row pool (with its "
            f"selection) {pool_ms:.2f} ms, ratio {full_ms / pool_ms:.1f}x.",
            "",
        ]
    )
    publish("similar facts (supersession notice)", body, not args.no_write)


if __name__ == "__main__":
    main()
