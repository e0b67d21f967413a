"""`mongogate memory import` interrupted by Ctrl-C (SIGINT) mid-import, in a real process: one
line on stderr saying what stays and how to go on, exit status 130 (issue 40: a 128-line
traceback), the memories already stored kept, and the same import run again stores the rest."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from tests.helpers import EXE

LINES = 3000  # the import must still be running when the signal comes: batches of 256


def test_ctrl_c_during_import_ends_in_one_line_and_a_rerun_finishes(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    config = tmp_path / "mongogate.toml"
    config.write_text(
        f'[database]\nuri = "{engine_uri}"\nname = "{db_name}"\n[server]\ndata_dir = "{tmp_path}"\n'
    )
    src = tmp_path / "in.jsonl"
    rows = [
        {"text": f"fact number {i}: the order AC-{i} shipped on day {i % 28 + 1}", "key": f"k{i}"}
        for i in range(LINES)
    ]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [*EXE, "memory", "import", str(src), "--tenant", "acme", "--config", str(config)]
    with MongoClient[dict[str, Any]](engine_uri) as client:
        memories = client[db_name]["memories"]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # readiness, not a margin: the first batch is stored, so the import is under way
            while memories.count_documents({}) == 0:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)  # a poll interval, not a margin: the condition decides
            stored_before = memories.count_documents({})
            assert stored_before < LINES
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:  # pragma: no cover
                proc.kill()
                proc.wait()
        assert proc.returncode == 130, err
        assert "Traceback" not in err and out == ""
        assert err.strip().splitlines() == [
            "mongogate: memory import interrupted: the memories stored so far stay; "
            "run the same import again for the rest (idempotent by key)"
        ]
        kept = memories.count_documents({})
        assert stored_before <= kept < LINES
        again = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=600)
        assert again.returncode == 0, again.stderr
        counts = json.loads(again.stdout)
        assert counts["created"] + counts["unchanged"] == LINES and counts["bad"] == 0
        assert memories.count_documents({}) == LINES
