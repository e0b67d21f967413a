"""`mongogate check` shows the retention setting (a real subprocess against the embedded engine)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import EXE, ROOT


@pytest.mark.parametrize(("days", "expected"), [(None, "retention: off"), ("30", "retention: 30 day(s)")])
def test_check_shows_retention(
    tmp_path: Path, engine_uri: str, db_name: str, days: str | None, expected: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    env |= {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
    }
    if days is not None:
        env["MONGOGATE_MEMORY__RETENTION_DAYS"] = days
    r = subprocess.run(
        [*EXE, "check", "--config", "examples/mongogate.toml"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert expected in r.stdout, r.stdout
