"""The one background queue behind both audit sinks (the file and ``audit_events``).

A request never waits on disk or on the audit database: from a running event loop ``submit``
only queues; from plain code (no running loop: the CLI, a worker thread, a test) it returns once
the item is handled, as callers there expect. One daemon thread drains the queue in batches and
is started on demand; with ``idle_s`` it exits after that long without items (the file sink
closes its file then) and starts again on the next one. ``close()`` handles everything queued
and stops the thread; it also runs at interpreter exit for every live queue (daemon threads
would lose what is queued). When the interpreter is too far into shutdown to start a thread,
the items are handled inline, on the caller's thread.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
import weakref
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
#: a queued item: a payload (or None: only the callback), and what to call once it is handled
_Item = tuple[Any, Callable[[], None] | None]
_STOP: Any = object()

_live: weakref.WeakSet[BackgroundQueue[Any]] = weakref.WeakSet()


class BackgroundQueue(Generic[T]):
    """Hand payloads to ``handle(batch)`` on one background thread; ``stopped()`` runs when the
    thread exits (idle or closed), on that thread, to release what ``handle`` opened."""

    def __init__(
        self,
        name: str,
        handle: Callable[[list[T]], None],
        *,
        stopped: Callable[[], None] = lambda: None,
        batch: int = 1000,
        idle_s: float | None = None,
    ) -> None:
        self._name = name
        self._handle = handle
        self._stopped = stopped
        self._batch = batch
        self._idle_s = idle_s
        self._queue: SimpleQueue[Any] = SimpleQueue()
        self._lock = threading.RLock()  # RLock: the shutdown path handles items inline while holding it
        self._thread: threading.Thread | None = None
        _live.add(self)

    @property
    def running(self) -> bool:
        return self._thread is not None

    # -- producers --------------------------------------------------------------------------

    def submit(self, payload: T) -> None:
        """Queue ``payload``. Inside a running event loop, return at once; elsewhere, once handled."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            done = threading.Event()
            self.put(payload, done.set)
            done.wait()
            return
        self.put(payload, None)

    def put(self, payload: T | None, callback: Callable[[], None] | None) -> None:
        """Queue ``payload`` (None: only a marker) and call ``callback`` once it is handled."""
        with self._lock:
            self._queue.put((payload, callback))
            if self._thread is None:
                self._start_locked()

    async def synced(self) -> None:
        """Wait, without blocking the loop, until everything queued so far is handled."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
                loop.call_soon_threadsafe(_resolve, future)

        self.put(None, wake)
        await future

    def flush(self) -> None:
        """Block until everything queued so far is handled (plain code, not the loop)."""
        done = threading.Event()
        self.put(None, done.set)
        done.wait()

    def close(self) -> None:
        """Handle everything queued, then stop the thread (a later item starts it again)."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            self._queue.put(_STOP)
        thread.join()

    def _start_locked(self) -> None:
        thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        try:
            thread.start()
        except RuntimeError:  # the interpreter is shutting down: handle everything on this thread
            self._drain_inline()
            return
        self._thread = thread

    # -- the background thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=self._idle_s)
            except Empty:
                with self._lock:  # nothing arrived: exit, unless an item slipped in meanwhile
                    if self._queue.empty():
                        self._exit_locked()
                        return
                continue
            batch = [first]
            with contextlib.suppress(Empty):
                while len(batch) < self._batch:
                    batch.append(self._queue.get_nowait())
            if self._process(batch):  # close(): stop; items queued behind the stop get a new thread
                with self._lock:
                    self._exit_locked()
                    if not self._queue.empty():
                        self._start_locked()
                return

    def _exit_locked(self) -> None:
        self._thread = None
        self._call_stopped()

    def _drain_inline(self) -> None:
        batch: list[Any] = []
        with contextlib.suppress(Empty):
            while True:
                batch.append(self._queue.get_nowait())
        self._process(batch)
        self._call_stopped()

    def _call_stopped(self) -> None:
        try:
            self._stopped()
        except Exception:
            log.exception("%s: releasing the sink failed", self._name)

    def _process(self, batch: list[Any]) -> bool:
        """Handle one batch, then call its callbacks; True if it held the stop marker."""
        items: list[_Item] = [item for item in batch if item is not _STOP]
        payloads = [payload for payload, _ in items if payload is not None]
        if payloads:
            try:
                self._handle(payloads)
            except Exception:  # a failing sink must not kill the thread (its waiters would hang)
                log.exception("%s: an audit batch could not be handled", self._name)
        for _, callback in items:
            if callback is not None:
                callback()
        return len(items) != len(batch)


class QueuedSink(Generic[T]):
    """What both sinks' callers wait on, said once: a sink keeps its ``BackgroundQueue`` in
    ``_queue`` and its ``submit`` queues there (each sink checks or counts something first)."""

    _queue: BackgroundQueue[T]

    async def synced(self) -> None:
        """Wait, without blocking the loop, until everything queued so far is written (or, for the
        MongoDB sink, given to its fallback)."""
        await self._queue.synced()

    def flush(self) -> None:
        """Block until everything queued so far is written (for plain, non-async code)."""
        self._queue.flush()

    def close(self) -> None:
        """Write everything queued, release what the sink opened (its file, its client) and stop
        the thread (a later item starts it again)."""
        self._queue.close()


def _resolve(future: asyncio.Future[None]) -> None:
    """Wake a caller awaiting ``synced()`` (run on its loop; a cancelled wait is left alone)."""
    if not future.done():
        future.set_result(None)


@atexit.register
def _close_all() -> None:
    """At interpreter exit, handle whatever is still queued. Closing one queue can feed another
    (the MongoDB sink's fallback is the file), so repeat while one was restarted (bounded)."""
    for _ in range(3):
        running = [q for q in list(_live) if q.running]
        if not running:
            return
        for q in running:
            q.close()
