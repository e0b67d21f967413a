"""The write signal's file when something else is at its path (red team, issue 26): a socket can
be in a shared directory (a real mongod's /tmp/mongodb-27017.sock), where another local user
could plant the file, rewind its counters (a stale recall: a forgotten memory back) or hold its
locks (every recall's loop blocked); a FIFO or a directory there must neither block a recall nor
fail a write. Real files, real processes (another user's where the suite runs as root)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mongogate.engine import write_signal
from mongogate.engine.files import secure_dir
from mongogate.engine.write_signal import FILE, WriteSignal, prepare
from mongogate.errors import ConfigError
from tests.test_engine_write_signal import write_once

pytestmark = pytest.mark.skipif(not write_signal.supported(), reason="no OFD locks on this platform")

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another user")

#: another local user: plants a signal file beside a socket in a shared directory, then on each
#: line of stdin snapshots its counters ("snap") or writes the snapshot back ("rewind")
PLANTER = textwrap.dedent(
    """
    import os, sys
    path, magic, size = sys.argv[1], bytes.fromhex(sys.argv[2]), int(sys.argv[3])
    os.umask(0)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    os.ftruncate(fd, size)
    os.pwrite(fd, magic, 0)
    print("planted", flush=True)
    snap = b""
    for line in sys.stdin:
        if line.strip() == "snap":
            snap = os.pread(fd, size, 0)
        else:
            os.pwrite(fd, snap, 0)
        print("done", flush=True)
    """
)


def other_users_python() -> str:
    """An interpreter another user can run (the planter needs the standard library only; this
    venv's may sit under root's home)."""
    for cand in ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable):
        with contextlib.suppress(OSError):
            ran = subprocess.run([cand, "-c", "pass"], user=NOBODY, group=NOBODY, cwd="/", check=False)
            if ran.returncode == 0:
                return cand
    pytest.skip("no Python interpreter another user may run")


def counter(path: Path, key: str) -> int:
    at = write_signal.HEADER + 8 * write_signal.bucket_of(key)
    return int.from_bytes(path.read_bytes()[at : at + 8], "little")


@as_root
def test_another_local_user_cannot_rewind_a_signal_planted_beside_a_shared_socket(shared: Path) -> None:
    """Before: the reader trusted the planted file, the planter wrote the counters back after a
    write, and the reader's stamp was the one before it (the recall skipped its read: stale)."""
    path = shared / FILE
    with subprocess.Popen(
        [other_users_python(), "-c", PLANTER, str(path), write_signal.MAGIC.hex(), str(write_signal.SIZE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        user=NOBODY,
        group=NOBODY,
        cwd="/",
    ) as planter:
        assert planter.stdin is not None and planter.stdout is not None
        try:
            assert planter.stdout.readline() == "planted\n"
            assert os.stat(path).st_uid == NOBODY
            reader, writer = WriteSignal(path), WriteSignal(path)
            before = reader.stamp("acme")
            planter.stdin.write("snap\n")
            planter.stdin.flush()
            assert planter.stdout.readline() == "done\n"
            write_once(writer, "acme")
            planter.stdin.write("rewind\n")
            planter.stdin.flush()
            assert planter.stdout.readline() == "done\n"
            after = reader.stamp("acme")
            assert before is None and after is None  # never trusted
            assert counter(path, "acme") == 0  # and never written: its locks cannot hold a writer
        finally:
            planter.kill()


def test_a_signal_file_other_users_can_open_is_never_trusted_nor_written(tmp_path: Path) -> None:
    path = prepare(tmp_path)
    assert path is not None
    assert WriteSignal(path).stamp("acme") is not None
    os.chmod(path, 0o666)
    reader, writer = WriteSignal(path), WriteSignal(path)
    assert reader.stamp("acme") is None
    write_once(writer, "acme")
    assert counter(path, "acme") == 0
    prepare(tmp_path)  # an engine start makes it private again
    assert os.stat(path).st_mode & 0o777 == 0o600 and WriteSignal(path).stamp("acme") is not None


@as_root
def test_a_signal_file_of_another_user_is_never_trusted_nor_written(tmp_path: Path) -> None:
    path = prepare(tmp_path)
    assert path is not None
    os.chown(path, NOBODY, NOBODY)
    assert WriteSignal(path).stamp("acme") is None
    write_once(WriteSignal(path), "acme")
    assert counter(path, "acme") == 0


FIFO_STAMP = textwrap.dedent(
    """
    import sys
    import anyio
    from pathlib import Path
    from mongogate.engine.write_signal import WriteSignal
    sig = WriteSignal(Path(sys.argv[1]))
    print(sig.stamp("acme"), flush=True)
    async def write():
        async with sig.writing("acme"):
            print("wrote", flush=True)
    anyio.run(write)
    """
)


def test_a_fifo_at_the_signal_path_never_blocks_a_recall_or_a_write(tmp_path: Path) -> None:
    """Before: the reader's open of the FIFO waited for a writer of it, forever (on the server's
    loop: every call hung). The timeout only bounds the failure."""
    os.mkfifo(tmp_path / FILE, 0o600)
    done = subprocess.run(
        [sys.executable, "-c", FIFO_STAMP, str(tmp_path / FILE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "None\nwrote\n"), done.stderr[-2000:]


@pytest.mark.anyio
async def test_a_directory_at_the_signal_path_fails_no_write(tmp_path: Path) -> None:
    (tmp_path / FILE).mkdir()
    sig = WriteSignal(tmp_path / FILE)
    async with sig.writing("acme"):  # before: IsADirectoryError out of every remember and forget
        assert sig.stamp("acme") is None


def test_an_engine_directory_refuses_a_planted_signal_symlink(tmp_path: Path) -> None:
    """secure_dir names the signal among mongogate's files: a symlink there is refused with the
    others' message (before: the engine start failed on prepare's O_NOFOLLOW, ELOOP)."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / FILE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="symlink"):
        secure_dir(data)
