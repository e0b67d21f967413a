"""Recall's default ranker: the per-scope index held in the server process (`cache.py`, one
`ScopeIndex` per scope: `scope_index.py`, over the generic index of `indexing/scope_index.py` and
its ranking, `indexing/fusion.py`) and the recall through it (`ranker.py`). Kept fresh by
`indexing/coherence.py`; chosen by `recall/search.py`."""
