"""docs/decisions/README.md lists every decision file of docs/decisions/ (issue 41: three were
missing from the index), and names none that is not there."""

from __future__ import annotations

import re
from pathlib import Path

DECISIONS = Path(__file__).resolve().parents[1] / "docs" / "decisions"


def test_the_decisions_index_lists_every_decision_file() -> None:
    index = (DECISIONS / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    present = {p.name for p in DECISIONS.glob("*.md")} - {"README.md"}
    assert present - listed == set(), "add these to docs/decisions/README.md"
    assert listed - present == set(), "these are listed but not in docs/decisions/"
