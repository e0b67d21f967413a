"""What the shown score (`scoring.shown`, branch floor) costs `ScopeIndex.rank`: the ranking of
10,000 memories plus reading every result's `score`, against the same at a base revision's
`recall/scope_index.py` (loaded from git), interleaved in the same run. No engine, no model:
random unit vectors and texts drawn from a fixed vocabulary.

    python benchmarks/recall_score_cost.py --base 34c517d --rounds 200
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from lib.gitref import module_at
from lib.results import command_line, parser

from mongogate.recall.inprocess.scope_index import ScopeIndex
from mongogate.recall.vectors import pack
from mongogate.textrank import query_tokens

NOW = datetime(2030, 1, 1, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[1]


def base_module(rev: str) -> ModuleType:
    """`recall/scope_index.py` as of `rev`, imported under another name."""
    return module_at(rev, "src/mongogate/recall/scope_index.py", "base_scope_index", Path(tempfile.mkdtemp()))


def fill(idx: ScopeIndex, n: int, rng: np.random.Generator) -> None:
    words = [f"w{i}" for i in range(3000)]
    for i in range(n):
        vec = rng.standard_normal(256).astype(np.float32)
        text = " ".join(rng.choice(words, size=12).tolist())
        idx.put({"_id": f"m{i}", "text": text, "embedding": pack(vec.tolist()), "embedding_model": "m"})


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--base", default="34c517d")
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--n", type=int, default=10_000)
    args = p.parse_args()
    rng = np.random.default_rng(26)
    new = ScopeIndex("m", 256, 0)
    old = base_module(args.base).ScopeIndex("m", 256, 0)
    fill(new, args.n, rng)
    fill(old, args.n, np.random.default_rng(26))
    queries = [
        (rng.standard_normal(256).tolist(), query_tokens(f"w{i} w{i * 7 % 3000} w{i * 13 % 3000}"))
        for i in range(args.rounds)
    ]
    times: dict[str, list[float]] = {"base": [], "floor": []}
    for i, (vec, toks) in enumerate(queries):
        for name, idx in (("base", old), ("floor", new)) if i % 2 else (("floor", new), ("base", old)):
            t0 = time.perf_counter()
            got = idx.rank(
                vec, toks, now=NOW, ns_path=None, metadata={}, depth=10, weight_text=0.5, weight_vector=0.5
            )
            _ = [r.score for r in got]
            times[name].append(time.perf_counter() - t0)
    med = {k: float(np.median(v)) * 1000 for k, v in times.items()}
    print(f"{command_line('recall_score_cost.py', None)}")
    print(f"ScopeIndex.rank + every result's score, {args.n:,} memories, {args.rounds} queries interleaved:")
    print(
        f"  base {args.base}: median {med['base']:.3f} ms; floor: median {med['floor']:.3f} ms;"
        f" ratio {med['floor'] / med['base']:.3f}"
    )


if __name__ == "__main__":
    main()
