"""Test hooks are arguments, never environment reads (issue 30; docs/decisions/packages-and-api.md,
"One assembly, test hooks as arguments"): a production server whose environment happens to carry
a test switch behaves as shipped."""

from __future__ import annotations

import re
from pathlib import Path

import mongogate

#: an environment read (`os.environ[...]`, `.get(...)`, `os.getenv(...)`) of a `MONGOGATE_TEST_` name
_READ = re.compile(r"""(environ\s*(\[|\.get\()|getenv\()\s*["']MONGOGATE_TEST_""")


def test_no_module_reads_a_test_switch_from_the_environment() -> None:
    """Broke before: server/memory_return.py read MONGOGATE_TEST_KEEP_FREED_MEMORY, so a server
    started with it set kept freed bodies' memory; it is now `serve_http(return_freed_memory=)`
    (tests/fault_harness.py `--keep-freed-memory`, benchmarks/slow_bodies.py's baseline)."""
    root = Path(mongogate.__file__).parent
    readers = [
        str(p.relative_to(root)) for p in sorted(root.rglob("*.py")) if _READ.search(p.read_text("utf-8"))
    ]
    assert readers == []
