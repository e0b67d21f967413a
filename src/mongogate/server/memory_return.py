"""Hand the memory of large request bodies back to the system once they are gone.

A body of up to ``server.max_request_bytes`` arrives in chunks that live until the request
ends. glibc's malloc raises its mmap threshold after the first large buffer is freed, so later
ones come from the heap, and a heap that fragmented under many such bodies is kept by the
process after they are freed: withheld bodies made the server grow and stay grown. Two steps:
a fixed mmap threshold (256 KiB: buffers that size or larger are mappings of their own, returned
when freed), and ``malloc_trim(0)`` after a request that received at least 1 MiB ends, at most
once a second. Elsewhere than glibc both are skipped.

Both are on unless the server is built with ``return_freed_memory=False`` (`serve_http`,
`mongogate.cli.main`; tests/fault_harness.py ``--keep-freed-memory``): a test hook, so
benchmarks/slow_bodies.py measures the difference in one run. No environment variable turns it
off.
"""

from __future__ import annotations

import ctypes
import logging
import time
from typing import Any

log = logging.getLogger(__name__)

#: mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 256 * 1024
#: a request that received this much triggers a trim when it ends
TRIM_AFTER_BYTES = 1024 * 1024
TRIM_INTERVAL_S = 1.0

_libc: Any = None
_last_trim = 0.0


def _glibc() -> Any:
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL("libc.so.6")
            _libc = lib if hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else False
        except OSError:
            _libc = False
    return _libc or None


def configure() -> None:
    """Once per server process, before it serves."""
    libc = _glibc()
    if libc is not None and not libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD):
        log.info("mallopt(M_MMAP_THRESHOLD) refused")


def body_ended(received: int) -> None:
    """A request body of ``received`` bytes is no longer held: trim when it was large."""
    global _last_trim
    if received < TRIM_AFTER_BYTES:
        return
    now = time.monotonic()
    libc = _glibc()
    if libc is None or now - _last_trim < TRIM_INTERVAL_S:
        return
    _last_trim = now
    libc.malloc_trim(0)
