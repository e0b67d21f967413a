"""The files of a data directory: private modes, credentials, the state file, the locks.

The directory is 0700 and every file in it 0600: the SQLite file holds every tenant's rows,
and the credentials file is what lets a process talk to the engine at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO
from urllib.parse import quote, quote_plus

from mongogate.errors import ConfigError, InUse
from mongogate.safefs import check_dir_path

STATE_FILE = "engine.json"
CREDENTIALS_FILE = "engine.credentials"
ENGINE_LOCK = "engine.lock"
START_LOCK = "engine.start.lock"
LOG_FILE = "engine.log"
DB_FILE = "mongogate.sqlite3"
#: the engine listens here, inside the 0700 directory: no other local user can connect at all
SOCKET_FILE = "engine.sock"
#: the kernel's limit on a Unix socket path (``sun_path`` is 108 bytes with its NUL)
MAX_SOCKET_PATH = 107
USER = "mongogate"
MECHANISM = "SCRAM-SHA-256"


def secure_dir(path: Path) -> None:
    """Create `path` 0700, or tighten it to 0700; refuse another user's directory or files.

    Once the directory is ours and 0700 nobody else can add entries, so one look at what is
    already there (planted while it was open) is enough: another user's file or a symlink
    among mongogate's names would let them choose the password or where the rows are written.
    """
    check_dir_path(path, what="server.data_dir")  # parents other users could change, a planted symlink
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise ConfigError(f"{path} belongs to another user (uid {st.st_uid}): it cannot be private to us")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    for p in path.iterdir():
        if not p.name.lstrip(".").startswith(OWN_FILES):
            continue
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            raise ConfigError(f"{p} is a symlink: remove it (mongogate writes only its own files there)")
        if st.st_uid != os.getuid():
            raise ConfigError(f"{p} belongs to another user (uid {st.st_uid}): remove it")


def private_file(path: Path) -> None:
    """Make sure `path` exists with mode 0600 (created so, or tightened when it is ours)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        st = os.fstat(fd)
        if st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


#: the files mongogate keeps in a data directory (only these are tightened: the directory may be shared)
OWN_FILES = ("engine.", "mongogate.sqlite3", "audit", "recall.")


def tighten_all(data_dir: Path) -> None:
    """mongogate's files in the directory become 0600 (a directory made by an older version)."""
    for p in data_dir.iterdir():
        if not p.name.startswith(OWN_FILES):
            continue
        with contextlib.suppress(OSError):
            st = p.lstat()
            if p.is_file() and not p.is_symlink() and st.st_uid == os.getuid() and st.st_mode & 0o077:
                os.chmod(p, 0o600)


def write_private(path: Path, data: dict[str, object]) -> None:
    """Write JSON atomically with mode 0600 (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.chmod(tmp, 0o600)  # an existing file keeps its mode through O_CREAT
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def credentials(data_dir: Path) -> str:
    """The engine's password for this data directory, generated once (0600, O_EXCL)."""
    path = data_dir / CREDENTIALS_FILE
    data = read_json(path)
    if data is None:
        with contextlib.suppress(FileExistsError):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"user": USER, "password": secrets.token_urlsafe(32)}, f)
        data = read_json(path)
    password = data.get("password") if data else None
    if not isinstance(password, str) or not password:
        raise ConfigError(f"{path} is unreadable or damaged; delete it and stop the engine to regenerate it")
    return password


def socket_path(data_dir: Path) -> Path:
    """The engine's socket in ``data_dir``; a path the kernel cannot bind is a start-up error."""
    path = data_dir.resolve() / SOCKET_FILE
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise ConfigError(
            f"server.data_dir {data_dir} is too long for the engine's socket ({len(os.fsencode(path))} bytes "
            f"with /{SOCKET_FILE}; the limit is {MAX_SOCKET_PATH}): choose a shorter data directory"
        )
    return path


def socket_uri(path: Path | str, password: str | None = None) -> str:
    """``mongodb://`` for a Unix socket (pymongo reads a percent-encoded path ending in .sock)."""
    who = f"{USER}:{quote_plus(password)}@" if password is not None else ""
    auth = f"&authSource=admin&authMechanism={MECHANISM}" if password is not None else ""
    return f"mongodb://{who}{quote(str(path), safe='')}/?directConnection=true{auth}"


@dataclass(frozen=True)
class EngineState:
    """What the engine process publishes in engine.json (no secret: the password stays in its own file)."""

    pid: int
    host: str
    port: int
    data_file: str
    auth: str
    idle_stop_s: float
    started_at: float
    #: the Unix socket it listens on (host and port are then empty); "" for an engine of an older
    #: version still running on a loopback port, which clients keep reaching that way until it stops
    socket: str = ""

    @property
    def address(self) -> str:
        return self.socket or f"{self.host}:{self.port}"

    def uri(self, password: str) -> str:
        if self.socket:
            return socket_uri(self.socket, password)
        return (
            f"mongodb://{USER}:{quote_plus(password)}@{self.host}:{self.port}/"
            f"?directConnection=true&authSource=admin&authMechanism={MECHANISM}"
        )

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def read_state(data_dir: Path) -> EngineState | None:
    data = read_json(data_dir / STATE_FILE)
    if data is None:
        return None
    try:
        return EngineState(
            pid=int(data["pid"]),  # type: ignore[call-overload]
            host=str(data["host"]),
            port=int(data["port"]),  # type: ignore[call-overload]
            data_file=str(data["data_file"]),
            auth=str(data["auth"]),
            idle_stop_s=float(data["idle_stop_s"]),  # type: ignore[arg-type]
            started_at=float(data["started_at"]),  # type: ignore[arg-type]
            socket=str(data.get("socket", "")),
        )
    except (KeyError, TypeError, ValueError):
        return None


def open_lock(path: Path) -> IO[str]:
    """One of the engine's lock files, opened (created 0600 when missing). Anything but a regular
    file at its name (a directory, a FIFO) is the data directory's fault: ConfigError, exit 2."""
    wrong = ConfigError(f"{path} is not a regular file: remove it (mongogate keeps only its own files there)")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except IsADirectoryError:
        raise wrong from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise wrong
    return os.fdopen(fd, "r+", encoding="utf-8")


def try_lock(f: IO[str]) -> bool:
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def lock_within(f: IO[str], timeout_s: float, what: str, *, hint: str = "") -> None:
    """Take an exclusive flock, polling (so a stuck holder is reported, not waited on forever).

    Past `timeout_s` it is InUse (exit 4): ending or resuming the holder helps, not the
    configuration; `hint` says how to find it."""
    deadline = time.monotonic() + timeout_s
    while not try_lock(f):
        if time.monotonic() > deadline:
            tail = f": {hint} names it" if hint else ""
            raise InUse(f"{what} is held by another process for more than {timeout_s:.0f} s{tail}")
        time.sleep(0.02)


def lock_pid(data_dir: Path) -> int | None:
    """The pid the engine holding engine.lock wrote into it (None when unreadable)."""
    try:
        text = (data_dir / ENGINE_LOCK).read_text(encoding="utf-8")
    except OSError:
        return None
    word = text.strip().rpartition(" ")[2]
    return int(word) if word.isdigit() else None


def engine_running(data_dir: Path) -> bool:
    """True while an engine process holds engine.lock (the kernel frees it when that process dies)."""
    path = data_dir / ENGINE_LOCK
    if not path.exists():
        return False
    with open_lock(path) as f:
        if try_lock(f):
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
            return False
    return True
