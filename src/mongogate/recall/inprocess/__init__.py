"""Recall's default ranker: the per-scope index held in the server process (`cache.py`, one
`ScopeIndex` per scope: `scope_index.py`), its ranking (`fusion.py`) and the recall through it
(`ranker.py`). Kept fresh by `recall/coherence.py`; chosen by `recall/search.py`."""
