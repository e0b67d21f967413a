"""benchmarks/redteam.py keeps working: two of its attacks, `--quick`, against a real server process.

The whole script (15 attacks, about a minute with `--quick`) is run by hand and recorded in
benchmarks/RESULTS.md ("redteam"); here only the audit dodges (issue 19 §4) and the oversized
writes (§1), which need no seeded tenant, so the script is not left to rot between runs.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.embedded_engine


def test_the_red_team_script_holds_on_two_attacks() -> None:
    cmd = [
        sys.executable,
        "benchmarks/redteam.py",
        "--quick",
        "--no-write",
        "--only",
        "oversized,audit-dodges",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=110, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 1 ") or line.startswith("| 4 ")]
    assert len(rows) == 5 and all(row.endswith("| **HELD** |") for row in rows), done.stdout
    assert "5 of 5 held or skipped, 0 failed." in done.stdout
