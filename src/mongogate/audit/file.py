"""The audit log's writer: a background thread that owns the file, so no event loop waits on disk.

A line submitted from a running event loop is queued and the call returns at once; a line
submitted from plain code (no running loop: the CLI, a worker thread, a test) returns once it
is written, as before. The thread and its queue are audit/queue.py's (shared with the MongoDB
sink). The file is opened once and kept open while events keep coming; the thread closes it
and exits after ``idle_s`` without events, and starts again on the next one. ``close()`` (also
run at interpreter exit for every live writer) writes everything queued.

The directory is reached and checked once (mongogate/safefs.py: no parent other users could
change, nobody else may write it) and its descriptor kept: the file is always (re)opened
relative to it, with ``O_NOFOLLOW``, created ``O_EXCL`` or appended to only when it is ours.
A directory renamed or re-pointed after the check is never followed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from mongogate.audit.queue import BackgroundQueue, QueuedSink
from mongogate.errors import ConfigError
from mongogate.safefs import check_private_file, open_dir, open_private_append


class AuditWriter(QueuedSink[str]):
    """Append lines to ``path`` and to ``stream`` (resolved per write when it is ``stderr``).
    ``synced``, ``flush`` and ``close`` are QueuedSink's (audit/queue.py)."""

    def __init__(self, path: Path, stream: Callable[[], TextIO | None], *, idle_s: float = 30.0) -> None:
        self.path = path
        self._stream = stream
        self._file: TextIO | None = None
        self._queue: BackgroundQueue[str] = BackgroundQueue(
            "mongogate-audit", self._write, stopped=self._close_file, batch=1000, idle_s=idle_s
        )
        #: the checked directory's descriptor, kept for the writer's life (closed when it is collected)
        self._dir: list[int] = []
        self._dir_lock = threading.Lock()
        weakref.finalize(self, _close_fds, self._dir)
        self.opened = 0  # how many times the file was opened (for tests and the benchmark)

    def check(self) -> None:
        """At start-up: refuse (ConfigError) a directory or file this writer would not write.
        Also takes the directory's descriptor, so later writes go where this check looked."""
        check_private_file(self.path, what="audit.path")
        self._directory()

    def _directory(self) -> int:
        with self._dir_lock:
            if not self._dir:
                self._dir.append(open_dir(self.path.parent, what="audit.path"))
            return self._dir[0]

    # -- producers --------------------------------------------------------------------------

    def submit(self, line: str) -> None:
        """Queue ``line``. Inside a running event loop, return at once; elsewhere, once written."""
        self._queue.submit(line)

    # -- on the queue's thread --------------------------------------------------------------

    def _write(self, lines: list[str]) -> None:
        stream = self._stream()
        text = "".join(lines)
        self._to_file(text, stream)
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):  # a closed stderr must not lose the file
                stream.write(text)
                stream.flush()

    def _to_file(self, text: str, stream: TextIO | None) -> None:
        try:
            if self._file is None:  # created 0600 (or ours, tightened), only when first written
                fd = open_private_append(self._directory(), self.path.name, self.path)
                self._file = os.fdopen(fd, "a", encoding="utf-8")
                self.opened += 1
            self._file.write(text)
            self._file.flush()
        except (OSError, ConfigError) as e:  # reported, not raised: the stream still gets the events
            self._close_file()
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):
                    stream.write(f"mongogate: cannot write audit log {self.path}: {e}\n")

    def _close_file(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


def _close_fds(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()
