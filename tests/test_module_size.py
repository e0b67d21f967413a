"""No module of `src/` over 450 lines (developers' guide; issue 30): a module that grows past it is
split by concern, as `recall/store.py` (`recall/setup.py`) and `tools/recall_tools.py`
(`tools/recall_reads.py`, `tools/recall_common.py`) were."""

from __future__ import annotations

from pathlib import Path

import mongogate

MAX_LINES = 450


def test_no_module_is_over_450_lines() -> None:
    root = Path(mongogate.__file__).parent
    over = {
        str(p.relative_to(root)): n
        for p in sorted(root.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert over == {}, f"split these by concern: {over}"
