"""Recall's ranker where a search index answers: `$vectorSearch` and `$text` in the database
(`ranker.py`), fused by reciprocal rank (`rank.py`, `terms.py`), the search index's definition and
probe (`vectors.py`). Chosen by `recall/search.py`."""
