"""The audit log's writer: a background thread that owns the file, so no event loop waits on disk.

A line submitted from a running event loop is queued and the call returns at once; a line
submitted from plain code (no running loop: the CLI, a worker thread, a test) returns once it
is written, as before. The file is opened once and kept open while events keep coming; the
thread closes it and exits after ``idle_s`` without events, and starts again on the next one.
``close()`` (also run at interpreter exit for every live writer) writes everything queued.

The directory is reached and checked once (mongogate/safefs.py: no parent other users could
change, nobody else may write it) and its descriptor kept: the file is always (re)opened
relative to it, with ``O_NOFOLLOW``, created ``O_EXCL`` or appended to only when it is ours.
A directory renamed or re-pointed after the check is never followed.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any, TextIO

from mongogate.errors import ConfigError
from mongogate.safefs import check_private_file, open_dir, open_private_append

#: a queued item: a line to write (or None: nothing, only the callback), and what to call after
_Item = tuple[str | None, Callable[[], None] | None]
_STOP = "\x00stop"

_live: weakref.WeakSet[AuditWriter] = weakref.WeakSet()


class AuditWriter:
    """Append lines to ``path`` and to ``stream`` (resolved per write when it is ``stderr``)."""

    def __init__(self, path: Path, stream: Callable[[], TextIO | None], *, idle_s: float = 30.0) -> None:
        self.path = path
        self._stream = stream
        self._idle_s = idle_s
        self._queue: SimpleQueue[_Item] = SimpleQueue()
        self._lock = threading.Lock()  # guards starting and stopping the thread
        self._thread: threading.Thread | None = None
        self._file: TextIO | None = None
        #: the checked directory's descriptor, kept for the writer's life (closed when it is collected)
        self._dir: list[int] = []
        self._dir_lock = threading.Lock()  # its own: _drain_inline writes while _lock is held
        weakref.finalize(self, _close_fds, self._dir)
        self.opened = 0  # how many times the file was opened (for tests and the benchmark)
        _live.add(self)

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
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            done = threading.Event()
            self._put((line, done.set))
            done.wait()
            return
        self._put((line, None))

    async def synced(self) -> None:
        """Wait, without blocking the loop, until every line queued so far is written and flushed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
                loop.call_soon_threadsafe(resolve_future, future)

        self._put((None, wake))
        await future

    def flush(self) -> None:
        """Block until every line queued so far is written (for plain, non-async code)."""
        done = threading.Event()
        self._put((None, done.set))
        done.wait()

    def close(self) -> None:
        """Write everything queued, close the file and stop the thread (a later line restarts it)."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            self._queue.put((_STOP, None))
        thread.join()

    def _put(self, item: _Item) -> None:
        with self._lock:
            self._queue.put(item)
            if self._thread is None:
                self._start_locked()

    def _start_locked(self) -> None:
        thread = threading.Thread(target=self._run, name="mongogate-audit", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # the interpreter is shutting down: write on this thread instead
            self._drain_inline()
            return
        self._thread = thread

    # -- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=self._idle_s)
            except Empty:
                with self._lock:  # nothing arrived: exit, unless a line slipped in meanwhile
                    if self._queue.empty():
                        self._close_file()
                        self._thread = None
                        return
                continue
            batch = [first]
            with contextlib.suppress(Empty):
                while len(batch) < 1000:
                    batch.append(self._queue.get_nowait())
            if self._write(batch):  # close(): the file is closed and this thread ends
                with self._lock:
                    self._close_file()
                    self._thread = None
                    if not self._queue.empty():  # lines queued behind the stop get a new thread
                        self._start_locked()
                return

    def _drain_inline(self) -> None:
        batch: list[_Item] = []
        with contextlib.suppress(Empty):
            while True:
                batch.append(self._queue.get_nowait())
        self._write(batch)
        self._close_file()

    def _write(self, batch: list[_Item]) -> bool:
        """Write one batch; True if it held the stop marker."""
        stream = self._stream()
        stop = False
        lines = []
        for line, _ in batch:
            if line == _STOP:
                stop = True
            elif line is not None:
                lines.append(line)
        if lines:
            text = "".join(lines)
            self._to_file(text, stream)
            if stream is not None:
                with contextlib.suppress(OSError, ValueError):  # a closed stderr must not lose the file
                    stream.write(text)
                    stream.flush()
        for _, callback in batch:
            if callback is not None:
                callback()
        return stop

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


def resolve_future(future: asyncio.Future[Any]) -> None:
    """Wake a caller awaiting `synced()` (run on its loop; a cancelled wait is left alone)."""
    if not future.done():
        future.set_result(None)


@atexit.register
def _close_all() -> None:
    """At interpreter exit, write whatever is still queued (daemon threads would lose it)."""
    for writer in list(_live):
        writer.close()


def stderr() -> TextIO | None:
    """``sys.stderr`` as it is now (tests and the CLI replace it)."""
    return sys.stderr
