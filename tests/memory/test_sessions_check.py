"""`mongogate check` shows the retention setting (in-process, against the shared engine)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import Cli


@pytest.mark.parametrize(("days", "expected"), [(None, "retention: off"), ("30", "retention: 30 day(s)")])
def test_check_shows_retention(
    cli: Cli, tmp_path: Path, engine_uri: str, db_name: str, days: str | None, expected: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")}
    env |= {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_DATABASE__URI": engine_uri,
        "MONGOGATE_DATABASE__NAME": db_name,
    }
    if days is not None:
        env["MONGOGATE_MEMORY__RETENTION_DAYS"] = days
    r = cli(["check", "--config", "examples/mongogate.toml"], env)
    assert r.returncode == 0, r.stderr
    assert expected in r.stdout, r.stdout
