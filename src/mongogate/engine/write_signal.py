"""The write signal: a small file beside the embedded engine's socket that lets a recall skip its
revision read when nothing was written since its last one, on the one machine the engine serves.

Why: on the embedded engine the revision read (one `find_one` by `_id`, `indexing/coherence.py`) is a
third of a settled recall at 1,000 memories (about 0.9 ms of 3; docs/decisions/recall-index.md,
"The write signal"). Every process that reaches the engine does so through its Unix socket, so
every one of them is on this machine and can share a file with the others.

The file (`recall.seq`, 0600 in the engine's 0700 data directory) holds an epoch (new at every
engine start) and a counter per bucket of scopes (a scope's key hashed into BUCKETS). The
database stays the only truth; the file only says when a process may trust what it last read:

- a writer (`writing`) takes a shared OFD lock on its bucket's flight byte, adds 1 to the bucket's
  counter, does its whole bracketed write (`begin`, the memory write, `bump`) and lets the lock
  go. The kernel lets the lock go when the process dies, and the counter moved at the start, so a
  write stopped halfway is never missed.
- a recall (`stamp`) reads (epoch, counter), THEN asks whether any lock is held on the bucket's
  flight byte (`F_OFD_GETLK`, taking nothing); if none, the stamp is what it read. Every write
  counted in that counter had taken its flight lock before its addition, so none of them is
  still writing; every write not counted moves the counter later. An index verified by a
  revision read that found no write in flight, taken after a stamp, answers again without the
  read while the stamp is the same.

Before, a writer also added 1 at its end, and a recall asked about the flight lock before it
read the counter: a write that began between the two gave a stamp that counted it while it was
still writing, and only the end's addition moved the counter past it. That addition could be
lost with no crash at all: when the counters' lock was held at the write's end, a daemon thread
finished it, and a process that exited right after its write (an import, a script) took the
thread with it (CI saw one of 1,200 additions lost). Reading first makes the end's addition
unneeded, so there is none, and no thread.

Counters only grow (each addition runs under an exclusive lock on the MUTEX byte), so a stamp
never comes back. OFD locks belong to an open file description, not to a process: two writes
of one process each open the file and hold their own lock, and a recall of the same process sees
them. A file replaced or removed (the data directory wiped) is noticed by its inode at every
stamp; the epoch changes when the engine restarts (a database restored while it was stopped).
Any error gives no stamp, so the recall reads the revision as before; a writer that cannot
open or lock the file (out of descriptors) refuses its write before it begins, as a retryable
`StorageError`.

No lock is ever waited for inside a system call: the event loop of a server runs every
tenant's calls, and a writer of the same user stopped inside its locked section (a debugger, a
SIGSTOP, a host under memory pressure) held a blocking `F_OFD_SETLKW` and with it every tenant
and `/healthz` until it died. A writer now tries each lock without blocking and waits between
tries on its clock (`mongogate.clock`, so tests drive it), at most `LOCK_WAIT_S`; a write that
cannot begin in time is refused before anything is written, as a retryable `StorageError`; an
engine start (`prepare`) waits as long, then refuses to start, naming the file (`InUse`, exit 4). The
end of a write takes no lock: it closes the file, which lets the flight lock go. Only a regular
file of this user that no other user can open is trusted or written (`_private`): a socket may be
in a shared directory (a real mongod's /tmp/mongodb-27017.sock), where another local user could
plant a file, rewind its counters and hold its locks; a FIFO there never blocks an open.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import stat
import struct
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.errors import InUse, StorageError

log = logging.getLogger(__name__)

#: the file's name, beside the engine's socket
FILE = "recall.seq"
#: buckets of scopes: two scopes in one bucket only make each other read more often
BUCKETS = 4096
MAGIC = b"mgseq\x00\x00\x01"
#: magic (8 bytes), epoch (8), then one counter of 8 bytes per bucket
HEADER = 16
SIZE = HEADER + 8 * BUCKETS
#: the byte whose exclusive lock serializes the counters' additions (any offset can be locked)
MUTEX = 0
#: the byte of bucket b held shared while one of its writes is in flight is FLIGHT + b
FLIGHT = 1 << 20
_U64 = struct.Struct("<Q")
_FLOCK = struct.Struct("hhqqi4x")  # struct flock on Linux: type, whence, start, len, pid
#: how long a write waits for its locks (each addition holds the counters' lock for microseconds;
#: only a process stopped inside one holds it longer) before it is refused, nothing written
LOCK_WAIT_S = 5.0
#: the first pause between two tries of a lock, doubled up to _POLL_MAX_S
_POLL_S = 0.0005
_POLL_MAX_S = 0.05
_BUSY = (errno.EAGAIN, errno.EACCES)


def _lock(fd: int, command: int, kind: int, start: int) -> int:
    """One OFD lock call on the byte at `start`; returns the type a GETLK reports."""
    got = fcntl.fcntl(fd, command, _FLOCK.pack(kind, os.SEEK_SET, start, 1, 0))
    return int(_FLOCK.unpack(got)[0])


def supported() -> bool:
    return all(hasattr(fcntl, n) for n in ("F_OFD_GETLK", "F_OFD_SETLK", "F_OFD_SETLKW"))


def in_flight(fd: int, bucket: int) -> bool:
    """Whether any open file holds a lock on the bucket's flight byte (taking nothing)."""
    return _lock(fd, fcntl.F_OFD_GETLK, fcntl.F_WRLCK, FLIGHT + bucket) != fcntl.F_UNLCK


def _try(fd: int, kind: int, start: int) -> bool:
    """One lock taken without waiting: False when another open file holds it."""
    try:
        _lock(fd, fcntl.F_OFD_SETLK, kind, start)
    except OSError as e:
        if e.errno in _BUSY:
            return False
        raise
    return True


def _add_locked(fd: int, buckets: Sequence[int]) -> None:
    """Each counter of `buckets` + 1; the caller holds the exclusive MUTEX lock, let go here."""
    try:
        for b in buckets:
            at = HEADER + 8 * b
            (value,) = _U64.unpack(os.pread(fd, 8, at))
            os.pwrite(fd, _U64.pack(value + 1), at)
    finally:
        _lock(fd, fcntl.F_OFD_SETLK, fcntl.F_UNLCK, MUTEX)


#: how every process opens the file: never through a symlink, never waiting on a FIFO
_OPEN = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK


def _private(st: os.stat_result) -> bool:
    """A regular file of this user that no other user can open: one that another local user
    planted (a socket in a shared directory such as /tmp, where a real mongod puts its socket)
    or can write would let them rewind a counter (a stale recall) or hold a lock forever (a
    loop blocked), so no reader trusts it and no writer signals in it."""
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def _ours(fd: int) -> bool:
    st = os.fstat(fd)
    return _private(st) and st.st_size == SIZE and os.pread(fd, 8, 0) == MAGIC


def prepare(
    directory: Path,
    *,
    clock: Clock = SYSTEM_CLOCK,
    pause: Callable[[float], None] = time.sleep,
    wait_s: float = LOCK_WAIT_S,
) -> Path | None:
    """At every engine start: the signal file in `directory`, created if absent, with a new
    epoch. None where the platform has no OFD locks (recalls then always read the revision).
    The counters' lock is tried as a writer tries it (`pause` between tries, on `clock`), at most
    `wait_s`: a process of this user stopped inside an addition refuses the start, naming the
    file, where a blocking lock hung it for as long as that process lived."""
    if not supported():
        return None
    path = directory / FILE
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, 0o600)
    try:
        deadline, wait = clock.now() + timedelta(seconds=wait_s), _POLL_S
        while not _try(fd, fcntl.F_WRLCK, MUTEX):
            if clock.now() >= deadline:
                raise InUse(
                    f"the write signal {path} is locked by another process of this user that kept "
                    f"it over {wait_s:g} s: a process stopped inside a write (a debugger, SIGSTOP)? "
                    f"`fuser {path}` names it: resume or end it, then start the engine again"
                )
            pause(wait)
            wait = min(wait * 2, _POLL_MAX_S)
        try:
            os.fchmod(fd, 0o600)  # the engine's owner only, whatever made it
            if not _ours(fd):
                os.ftruncate(fd, 0)  # new, or not ours: every counter from 0, under a new epoch
                os.ftruncate(fd, SIZE)
                os.pwrite(fd, MAGIC, 0)
            os.pwrite(fd, os.urandom(8), 8)
        finally:
            _lock(fd, fcntl.F_OFD_SETLK, fcntl.F_UNLCK, MUTEX)
    finally:
        os.close(fd)
    return path


def bucket_of(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") % BUCKETS


class WriteSignal:
    """The signal file of one engine, as a writer and a reader use it (module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._ino: tuple[int, int] | None = None

    @classmethod
    def of(cls, client: Any) -> WriteSignal | None:
        """The signal of the engine `client` reaches through a Unix socket, else None (TCP, a
        replica set, a remote MongoDB: no file every writer shares)."""
        if not supported():
            return None
        try:
            seeds = list(client.topology_description.server_descriptions())
        except Exception:  # not a pymongo client
            return None
        if len(seeds) != 1:
            return None
        host, port = seeds[0]
        if port is not None or not str(host).endswith(".sock"):
            return None
        return cls(Path(str(host)).parent / FILE)

    # -- a writer -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def writing(
        self, *keys: str, clock: Clock = SYSTEM_CLOCK, wait_s: float = LOCK_WAIT_S
    ) -> AsyncIterator[None]:
        """Around a whole bracketed write of the scopes `keys` (module docstring), all on one open
        file (a reembed batch of a thousand scopes held a thousand: EMFILE under `ulimit -n 1024`).
        Where the file does not exist (an engine that made none) there is nothing to signal and
        no reader trusts it. The locks are tried, never waited for in a system call: between
        tries the write waits on `clock`, at most `wait_s`, then is refused (nothing written)."""
        try:  # before anything is written: a failure here refuses the write, and a retry may pass
            fd = self._open_for_writing()
        except OSError as e:
            raise self._refused(e) from e
        if fd is not None:
            try:
                trusted = _ours(fd)
            except OSError as e:
                os.close(fd)
                raise self._refused(e) from e
            if not trusted:  # no reader trusts it: nothing to tell
                os.close(fd)
                fd = None
        if fd is None:
            yield
            return
        try:
            buckets = sorted({bucket_of(key) for key in keys})
            try:  # every flight lock, then +1 to each counter under the MUTEX lock
                deadline = clock.now() + timedelta(seconds=wait_s)
                for b in buckets:
                    await self._wait_for(fd, fcntl.F_RDLCK, FLIGHT + b, clock, deadline)
                await self._wait_for(fd, fcntl.F_WRLCK, MUTEX, clock, deadline)
                _add_locked(fd, buckets)
            except OSError as e:
                raise self._refused(e) from e
            yield
        finally:
            os.close(fd)  # lets the flight lock go: the write is over (the counter moved at its start)

    async def _wait_for(self, fd: int, kind: int, start: int, clock: Clock, deadline: datetime) -> None:
        """One lock, tried until `deadline` of `clock`; past it a refusal (a retry may pass)."""
        pause = _POLL_S
        while not _try(fd, kind, start):
            if clock.now() >= deadline:
                raise OSError(
                    errno.EAGAIN, "another process held the signal's lock longer than a write waits"
                )
            await clock.sleep(pause)
            pause = min(pause * 2, _POLL_MAX_S)

    def _refused(self, e: OSError) -> StorageError:
        log.warning("write signal %s: %s; the write is refused before it began", self.path, e)
        return StorageError(
            "could not tell the other server processes of this write (the engine's write signal); "
            "nothing was written",
            advice=f"{e.strerror or type(e).__name__}; retry in about 5 s",
        )

    def _open_for_writing(self) -> int | None:
        """The file open for writing; None where no reader trusts what is there (nothing, a
        directory, another user's file). A private file this process cannot open raises: a
        reader may trust it, so the write must not go unsignalled."""
        try:
            return os.open(self.path, os.O_RDWR | _OPEN)
        except FileNotFoundError:
            return None
        except OSError:
            try:
                trusted = _private(os.lstat(self.path))
            except OSError:
                trusted = False
            if trusted:
                raise
            return None

    # -- a reader -------------------------------------------------------------------------------

    def stamp(self, key: str) -> tuple[int, int] | None:
        """(epoch, counter) of scope `key`'s bucket when no write of it is in flight, else None
        (also when the file is missing, replaced or unreadable)."""
        try:
            fd = self._open()
            if fd is None:
                return None
            b = bucket_of(key)
            try:  # no addition half-read; never waited for (a writer stopped inside one)
                _lock(fd, fcntl.F_OFD_SETLK, fcntl.F_RDLCK, MUTEX)
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EACCES):
                    return None  # an addition right now: read the revision
                raise
            try:
                (epoch,) = _U64.unpack(os.pread(fd, 8, 8))
                (count,) = _U64.unpack(os.pread(fd, 8, HEADER + 8 * b))
            finally:
                _lock(fd, fcntl.F_OFD_SETLK, fcntl.F_UNLCK, MUTEX)
            if in_flight(fd, b):  # asked AFTER the read: a write it counts may still be writing
                return None
            return int(epoch), int(count)
        except (OSError, struct.error) as e:
            log.debug("write signal %s unreadable (%s): reading the revision", self.path, e)
            self.close()
            return None

    def usable(self) -> bool:
        """The file is there and trusted (`mongogate check`): a stamp may come from it."""
        try:
            return self._open() is not None
        except OSError:
            self.close()
            return False

    def _open(self) -> int | None:
        """The file open for reading, reopened when it was replaced (its inode changed)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.close()
            return None
        if self._fd is None or self._ino != (st.st_dev, st.st_ino):
            self.close()
            fd = os.open(self.path, os.O_RDONLY | _OPEN)
            held = os.fstat(fd)
            if not _ours(fd):
                os.close(fd)
                return None
            self._fd, self._ino = fd, (held.st_dev, held.st_ino)
        return self._fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd = self._ino = None
