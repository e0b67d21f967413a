"""The engine's write signal (engine/write_signal.py): a write in flight in any process hides the
stamp, its start moves it (a stamp read while a write begins never counts that write as done),
racing writers never lose an addition, and a restarted engine or a replaced file is never
trusted as before. Real files, real processes, real OFD locks; no clock."""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pymongo import MongoClient

from mongogate.clock import SYSTEM_CLOCK, Clock, ManualClock
from mongogate.engine import write_signal
from mongogate.engine.files import socket_uri
from mongogate.engine.write_signal import BUCKETS, FILE, LOCK_WAIT_S, WriteSignal, bucket_of, prepare
from mongogate.errors import InUse, StorageError

pytestmark = pytest.mark.skipif(not write_signal.supported(), reason="no OFD locks on this platform")

ROOT = Path(__file__).resolve().parents[1]

HOLDER = textwrap.dedent(
    """
    import sys
    import anyio
    from pathlib import Path
    from mongogate.engine.write_signal import WriteSignal
    async def main():
        async with WriteSignal(Path(sys.argv[1])).writing(sys.argv[2]):
            print("in flight", flush=True)
            sys.stdin.readline()  # until told, or killed
    anyio.run(main)
    """
)


def write_once(
    sig: WriteSignal, key: str, *, clock: Clock = SYSTEM_CLOCK, wait_s: float = LOCK_WAIT_S
) -> None:
    """One whole write of `key` with nothing in it, from synchronous code (a loop of its own)."""

    async def write() -> None:
        async with sig.writing(key, clock=clock, wait_s=wait_s):
            pass

    anyio.run(write)


@contextlib.contextmanager
def another_process(script: str, *args: str, ready: str | None) -> Iterator[subprocess.Popen[str]]:
    """`script` in another process, once it printed `ready` (None: at once); killed if still there
    at the end."""
    with subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert ready is None or proc.stdout.readline() == ready + "\n"
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def holder(path: Path, key: str) -> contextlib.AbstractContextManager[subprocess.Popen[str]]:
    """Another process inside `writing(key)`."""
    return another_process(HOLDER, str(path), key, ready="in flight")


def other_key(key: str) -> str:
    return next(k for k in (f"other-{i}" for i in range(1000)) if bucket_of(k) != bucket_of(key))


@pytest.mark.parametrize(
    ("uri", "found"),
    [
        (socket_uri("/tmp/e/engine.sock"), "/tmp/e/" + FILE),
        (socket_uri("/tmp/e/engine.sock", "pw"), "/tmp/e/" + FILE),
        ("mongodb://127.0.0.1:27017/", None),
        ("mongodb://a.example:27017,b.example:27017/?replicaSet=rs", None),
    ],
)
def test_the_signal_is_found_beside_a_unix_socket_only(uri: str, found: str | None) -> None:
    client: MongoClient[dict[str, object]] = MongoClient(uri, connect=False)
    try:
        sig = WriteSignal.of(client)
        assert (str(sig.path) if sig is not None else None) == found
    finally:
        client.close()


def test_a_write_in_flight_in_another_process_hides_the_stamp_and_it_moved_after(tmp_path: Path) -> None:
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    before = reader.stamp("acme")
    assert before is not None
    with holder(path, "acme") as proc:
        assert reader.stamp("acme") is None  # in flight: every recall reads the revision
        assert reader.stamp(other_key("acme")) is not None  # another bucket is not held
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
    after = reader.stamp("acme")
    assert after is not None and after[0] == before[0] and after[1] == before[1] + 1


def test_a_writer_killed_halfway_leaves_no_write_in_flight_and_the_stamp_moved(tmp_path: Path) -> None:
    """The kernel lets the dead process's lock go; the addition at its start already moved the
    counter, so an index verified before it is never trusted again."""
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    before = reader.stamp("acme")
    with holder(path, "acme") as proc:
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    after = reader.stamp("acme")
    assert before is not None and after is not None
    assert after[1] == before[1] + 1


@pytest.mark.anyio
async def test_two_writes_of_one_process_each_hold_their_own_flight(tmp_path: Path) -> None:
    """OFD locks belong to an open file, not a process: the first write ending does not end the
    second's, and a recall of the same process sees both."""
    path = prepare(tmp_path)
    assert path is not None
    reader, first, second = WriteSignal(path), WriteSignal(path), WriteSignal(path)
    async with first.writing("acme"):
        async with second.writing("acme"):
            assert reader.stamp("acme") is None
        assert reader.stamp("acme") is None
    assert reader.stamp("acme") is not None


def test_a_write_that_begins_while_a_stamp_is_taken_moves_the_counter_past_that_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failpoint: another process begins a write of the bucket right after the recall asked
    whether one is in flight, and is killed before its end. The stamp taken then must differ
    from every stamp after that write, or an index verified at it would be trusted with the
    write unseen. Before: the flight was asked first, the counter read after it counted the write
    still in flight, and only the write's end (never reached here, and lost by a process that
    exited while a thread finished it) moved the counter past it."""
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    asked = write_signal.in_flight
    begun: list[subprocess.Popen[str]] = []
    with contextlib.ExitStack() as stack:

        def then_a_write_begins(fd: int, bucket: int) -> bool:
            held = asked(fd, bucket)
            if not begun:
                begun.append(stack.enter_context(holder(path, "acme")))
            return held

        monkeypatch.setattr(write_signal, "in_flight", then_a_write_begins)
        during = reader.stamp("acme")
        monkeypatch.undo()
        assert begun
        begun[0].send_signal(signal.SIGKILL)
        assert begun[0].wait(timeout=60) == -signal.SIGKILL
    after = reader.stamp("acme")
    assert after is not None and during != after


def _race(path: str, key: str, n: int, barrier: Any) -> None:
    sig = WriteSignal(Path(path))
    barrier.wait()
    for _ in range(n):
        write_once(sig, key)


def test_racing_writers_in_three_processes_never_lose_an_addition(tmp_path: Path) -> None:
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    before = reader.stamp("acme")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(3)
    procs = [ctx.Process(target=_race, args=(str(path), "acme", 200, barrier)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    after = reader.stamp("acme")
    assert before is not None and after is not None
    assert after[1] - before[1] == 3 * 200


def test_a_restarted_engine_or_a_replaced_file_is_never_trusted_as_before(tmp_path: Path) -> None:
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    first = reader.stamp("acme")
    assert prepare(tmp_path) == path  # the engine started again: same counters, a new epoch
    second = reader.stamp("acme")
    assert first is not None and second is not None
    assert second[1] == first[1] and second[0] != first[0]
    fresh = tmp_path / "other"
    fresh.mkdir()
    os.replace(prepare(fresh) or "", path)  # the directory wiped and a new engine's file there
    third = reader.stamp("acme")
    assert third is not None and third[0] not in (first[0], second[0])


@pytest.mark.parametrize(
    "content",
    [b"", b"x" * 100, b"\0" * (write_signal.SIZE)],
    ids=["empty", "short", "right size, not ours"],
)
def test_a_file_that_is_not_a_signal_is_never_trusted_and_a_start_remakes_it(
    tmp_path: Path, content: bytes
) -> None:
    (tmp_path / FILE).write_bytes(content)
    reader = WriteSignal(tmp_path / FILE)
    assert reader.stamp("acme") is None
    write_once(reader, "acme")  # a writer still signals (the counters of a foreign file)
    prepare(tmp_path)
    assert reader.stamp("acme") is not None
    assert os.stat(tmp_path / FILE).st_mode & 0o777 == 0o600
    assert os.path.getsize(tmp_path / FILE) == write_signal.SIZE


@pytest.mark.anyio
async def test_no_file_means_no_stamp_and_writers_carry_on(tmp_path: Path) -> None:
    sig = WriteSignal(tmp_path / FILE)
    async with sig.writing("acme"):
        assert sig.stamp("acme") is None
    assert not (tmp_path / FILE).exists() and not sig.usable()
    prepare(tmp_path)
    assert sig.usable()
    assert 0 <= bucket_of("acme") < BUCKETS


MUTEX_HOLDER = textwrap.dedent(
    """
    import fcntl, os, sys
    from mongogate.engine import write_signal as ws
    fd = os.open(sys.argv[1], os.O_RDWR)
    ws._lock(fd, fcntl.F_OFD_SETLKW, fcntl.F_WRLCK, ws.MUTEX)  # a writer stopped inside an addition
    print("holding", flush=True)
    sys.stdin.readline()
    """
)


def test_a_writer_stopped_inside_an_addition_never_blocks_a_recall(tmp_path: Path) -> None:
    """The reader never waits for the counters' lock: it reads the revision instead."""
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    assert reader.stamp("acme") is not None
    with another_process(MUTEX_HOLDER, str(path), ready="holding"):
        assert reader.stamp("acme") is None  # answered at once, no stamp
    assert reader.stamp("acme") is not None


def test_an_engine_start_never_waits_forever_for_a_writer_stopped_inside_an_addition(
    tmp_path: Path,
) -> None:
    """Old code: the start (each `engine start`, `make run`) took the counters' lock in a blocking
    call and hung for as long as the stopped writer lived. Now it tries the lock on its clock for
    LOCK_WAIT_S, then refuses with the file and what to do; once the writer is gone it starts."""
    path = prepare(tmp_path)
    assert path is not None
    epoch = WriteSignal(path).stamp("acme")
    clock = ManualClock()
    waited: list[float] = []

    def pause(seconds: float) -> None:
        waited.append(seconds)
        clock.advance(seconds)

    with (
        another_process(MUTEX_HOLDER, str(path), ready="holding"),
        pytest.raises(InUse) as refused,
    ):
        prepare(tmp_path, clock=clock, pause=pause)
    assert LOCK_WAIT_S <= sum(waited) < LOCK_WAIT_S + 1
    assert str(path) in str(refused.value) and "stopped" in str(refused.value)
    assert refused.value.exit_status == 4  # held by another process: end or resume it (not 2, not 3)
    assert prepare(tmp_path, clock=clock, pause=pause) == path  # the writer gone: the start goes on
    again = WriteSignal(path).stamp("acme")
    assert epoch is not None and again is not None and again[0] != epoch[0]  # under a new epoch


NO_FILES_LEFT = textwrap.dedent(
    """
    import os, resource, sys
    import anyio
    from pathlib import Path
    from mongogate.engine.write_signal import WriteSignal
    from mongogate.errors import MongogateError
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    async def write():
        held = []
        try:
            while True:  # every descriptor this process may have, taken (a server at its limit)
                held.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        try:
            async with WriteSignal(Path(sys.argv[1])).writing("acme"):
                print("wrote")
        except MongogateError as e:
            print(e.code, e.retryable)
    anyio.run(write)
    """
)


def test_a_write_that_cannot_open_the_signal_is_a_retryable_storage_error(tmp_path: Path) -> None:
    """Out of file descriptors, the write is refused before anything is written, as a storage
    error a retry can get past (the tools answer `[storage_error] (retryable)`), not an internal one."""
    path = prepare(tmp_path)
    assert path is not None
    done = subprocess.run(
        [sys.executable, "-c", NO_FILES_LEFT, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.strip() == "storage_error True", done.stderr[-2000:]


def _flight_held(path: Path, key: str) -> bool:
    """Whether any open file holds a lock on the bucket's flight byte (as a recall asks)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return write_signal.in_flight(fd, bucket_of(key))
    finally:
        os.close(fd)


@pytest.mark.anyio
async def test_a_write_that_cannot_get_the_counters_lock_in_time_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    """A writer of this user stopped inside an addition holds the counters' lock: a write waits
    for it on its clock, never inside a system call, and past its wait is refused as a
    retryable storage error before its body runs; no counter moved. The manual clock passes the
    wait without real time. Before: a blocking F_OFD_SETLKW held the server's event loop (every
    tenant's calls and /healthz) until the holder died."""
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    before = reader.stamp("acme")
    clock = ManualClock()
    started = clock.now()
    ran: list[bool] = []
    with another_process(MUTEX_HOLDER, str(path), ready="holding"):
        with pytest.raises(StorageError) as refused:
            async with WriteSignal(path).writing("acme", clock=clock, wait_s=2.0):
                ran.append(True)
        assert not _flight_held(path, "acme")  # let go with the refusal
    assert ran == []  # the write never began
    assert refused.value.retryable and "nothing was written" in str(refused.value)
    assert (clock.now() - started).total_seconds() >= 2.0  # its whole wait, on its clock
    assert reader.stamp("acme") == before  # nothing to tell: no write happened


@pytest.mark.anyio
async def test_a_write_waiting_for_the_counters_lock_leaves_the_loop_free_and_goes_on_once_let_go(
    tmp_path: Path,
) -> None:
    """While it waits, the event loop runs everything else; once the holder lets go, the write
    goes on and its addition lands."""
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    before = reader.stamp("acme")
    written = anyio.Event()

    async def write() -> None:
        async with WriteSignal(path).writing("acme", wait_s=600):  # the system clock
            pass
        written.set()

    with another_process(MUTEX_HOLDER, str(path), ready="holding") as holder:
        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            for _ in range(200):  # other work of the loop runs meanwhile
                await anyio.sleep(0)
            assert not written.is_set()  # still waiting: the lock is held
            assert holder.stdin is not None
            holder.stdin.write("\n")  # the holder lets go (and exits)
            holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
    after = reader.stamp("acme")
    assert before is not None and after is not None and after[1] == before[1] + 1


def test_a_write_ends_at_once_and_lets_its_flight_go_while_the_counters_lock_is_held(
    tmp_path: Path,
) -> None:
    """The end of a write takes no lock: with a writer of this user stopped inside an addition,
    a write that already began ends, its flight is let go and nothing is left running in its
    process. Before: the end tried the counters' lock and, finding it held, left a daemon
    thread to add 1 later, which a process exiting right after its write took with it."""
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    before = reader.stamp("acme")

    async def write() -> None:
        async with WriteSignal(path).writing("acme"):
            stack.enter_context(another_process(MUTEX_HOLDER, str(path), ready="holding"))
        assert not _flight_held(path, "acme")  # over, at once, with the lock still held

    with contextlib.ExitStack() as stack:
        anyio.run(write)
        assert not [t for t in threading.enumerate() if t.name == "write-signal"]  # none to finish it
    after = reader.stamp("acme")
    assert before is not None and after is not None and after[1] == before[1] + 1


@pytest.mark.anyio
async def test_remember_while_another_process_holds_the_engines_signal_is_refused_retryable(
    engine_uri: str, db_name: str, tmp_path: Path
) -> None:
    """Through the MCP tool, on the session's engine (a Unix socket, with its signal): a
    `remember` that cannot take the signal's lock within its wait is `[storage_error]
    (retryable)` and stores nothing, while other work of the server goes on; once the holder
    lets go the retry stores it. The server's clock is a manual one: the wait passes at once."""
    from mcp import Client

    from mongogate.server.app import build_server
    from tests.conftest import make_settings

    clock = ManualClock()
    server = build_server(make_settings(engine_uri, db_name, tmp_path), clock=clock)
    client: MongoClient[dict[str, object]] = MongoClient(engine_uri)
    try:
        sig = WriteSignal.of(client)
        assert sig is not None and sig.path.exists()
        async with Client(server) as c:
            with another_process(MUTEX_HOLDER, str(sig.path), ready="holding") as holder:
                r = await c.call_tool("remember", {"text": "the cat is called Miso", "key": "cat"})
                text = r.content[0].text  # type: ignore[union-attr]
                assert r.is_error and text.startswith("[storage_error] (retryable) "), text
                assert "nothing was written" in text
                assert not (await c.call_tool("list_sessions", {})).is_error  # the server goes on
                assert client[db_name]["memories"].count_documents({}) == 0
                assert holder.stdin is not None
                holder.stdin.write("\n")
                holder.stdin.flush()
                assert holder.wait(timeout=60) == 0
            again = await c.call_tool("remember", {"text": "the cat is called Miso", "key": "cat"})
            assert not again.is_error, again.content
        assert client[db_name]["memories"].count_documents({}) == 1
    finally:
        client.close()


#: a writer in another process that stops at each step of `writing` until told to go on (a line
#: on stdin), printing the step it stopped at: before its first flight lock, after each flight lock
#: ("flighted-<n>"), holding the counters' lock before its addition ("adding"), at the start of its
#: body (where `begin` is sent: "added") and at its end (after `bump`: "bumped"), then closed
STEPPED = textwrap.dedent(
    """
    import sys
    import anyio
    from pathlib import Path
    from mongogate.engine import write_signal as ws

    def stop(step):
        print(step, flush=True)
        sys.stdin.readline()

    taken = []
    try_lock, add_locked = ws._try, ws._add_locked

    def stepped_try(fd, kind, start):
        if start >= ws.FLIGHT and not taken:
            stop("before-flight")
        got = try_lock(fd, kind, start)
        if got and start >= ws.FLIGHT:
            taken.append(start)
            stop(f"flighted-{len(taken)}")
        return got

    def stepped_add(fd, buckets):
        stop("adding")
        add_locked(fd, buckets)

    ws._try, ws._add_locked = stepped_try, stepped_add

    async def main():
        async with ws.WriteSignal(Path(sys.argv[1])).writing(*sys.argv[2:]):
            stop("added")
            stop("bumped")
        stop("closed")

    anyio.run(main)
    """
)


class Stepped:
    """The STEPPED writer, driven one step at a time."""

    def __init__(self, proc: subprocess.Popen[str], keys: int) -> None:
        self.proc = proc
        self.steps = ["before-flight", *(f"flighted-{n}" for n in range(1, keys + 1))]
        self.steps += ["adding", "added", "bumped", "closed"]
        self.at = self._read()

    def _read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def to(self, step: str) -> None:
        """On until it stops at `step` (or ends, for "over")."""
        assert self.proc.stdin is not None
        while self.at != step:
            assert self.at in self.steps, self.at
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            self.at = self._read() if step != "over" or self.at != "closed" else "over"
        if step == "over":
            assert self.proc.wait(timeout=60) == 0

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(timeout=60) == -signal.SIGKILL


@contextlib.contextmanager
def stepped(path: Path, *keys: str) -> Iterator[Stepped]:
    with another_process(STEPPED, str(path), *keys, ready=None) as proc:
        yield Stepped(proc, len(keys))


def three_buckets() -> list[str]:
    """Three keys of three buckets, in the order a write locks their flights (by bucket)."""
    found: dict[int, str] = {}
    for key in (f"scope-{i}" for i in range(1000)):
        found.setdefault(bucket_of(key), key)
        if len(found) == 3:
            break
    return [found[b] for b in sorted(found)]


KEYS3 = three_buckets()
STEPS3 = ["before-flight", "flighted-1", "flighted-2", "flighted-3", "adding", "added", "bumped", "closed"]


def expected_during(step: str, i: int, before: tuple[int, int]) -> tuple[int, int] | None:
    """The stamp of the write's i-th key (in bucket order) while the write stops at `step`."""
    if step == "before-flight":
        return before
    if step.startswith("flighted-"):
        return None if i < int(step.split("-")[1]) else before
    if step == "closed":
        return (before[0], before[1] + 1)
    return None  # the counters' lock held, or the flight: an addition or a write under way


@pytest.mark.parametrize("end", ["ends", "killed"])
@pytest.mark.parametrize("step", STEPS3)
def test_a_stamp_taken_at_any_step_of_a_write_of_three_buckets_is_never_one_after_it(
    tmp_path: Path, step: str, end: str
) -> None:
    """Another process writes three scopes of three buckets (one open file) and stops at `step`;
    a recall stamps each scope there. A stamp of a scope is given only while its write has not
    taken that bucket's flight (and then the write's addition moves the counter after it) or once
    the write is over; the write then ends, or is killed there: a write killed before its
    addition wrote nothing (its `begin` comes after it) and left every counter where it was, one
    killed after it moved every counter. No stamp taken during the write equals one after it
    unless the write was over."""
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    before = [reader.stamp(k) for k in KEYS3]
    assert all(b is not None for b in before)
    with stepped(path, *KEYS3) as writer:
        writer.to(step)
        during = [reader.stamp(k) for k in KEYS3]
        if end == "killed":
            writer.kill()
        else:
            writer.to("over")
    after = [reader.stamp(k) for k in KEYS3]
    wrote = end == "ends" or STEPS3.index(step) >= STEPS3.index("added")
    for i, (b, d, a) in enumerate(zip(before, during, after, strict=True)):
        assert b is not None and a is not None
        assert d == expected_during(step, i, b), (i, d)
        assert a == ((b[0], b[1] + 1) if wrote else b), (i, a)
        assert d is None or d != a or step == "closed" or not wrote


STEPS1 = ["before-flight", "flighted-1", "adding", "added", "bumped", "closed"]


@pytest.mark.parametrize(
    ("read_at", "ask_at"),
    [(r, a) for i, r in enumerate(STEPS1) for a in STEPS1[i + 1 :]],
)
def test_a_write_that_moves_on_between_a_stamps_counter_read_and_its_flight_ask_is_counted_or_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_at: str, ask_at: str
) -> None:
    """A failpoint inside the recall: the counter is read with the writer (another process) at
    `read_at`, and the writer moves on to `ask_at` before the recall asks about the flight. A
    stamp is given only when the writer is over by the ask, and then it is the counter before the
    write's addition (the next stamp differs) or after it (a revision read now sees its bump)."""
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    before = reader.stamp("acme")
    assert before is not None
    asked = write_signal.in_flight
    with stepped(path, "acme") as writer:

        def the_writer_moves_on(fd: int, bucket: int) -> bool:
            writer.to(ask_at)
            return asked(fd, bucket)

        writer.to(read_at)
        monkeypatch.setattr(write_signal, "in_flight", the_writer_moves_on)
        during = reader.stamp("acme")
        monkeypatch.undo()
        counted = read_at in ("added", "bumped")  # the addition landed before the counter read
        if read_at == "adding":
            assert during is None  # the counters' lock is held: no read, no ask
        elif ask_at != "closed":
            assert during is None  # the flight is held at the ask
        else:
            assert during == (before[0], before[1] + counted)
        writer.to("over")
    after = reader.stamp("acme")
    assert after == (before[0], before[1] + 1)
    assert during is None or during != after or ask_at == "closed"


@pytest.mark.parametrize("change", ["restarted", "replaced"])
def test_an_engine_restarted_or_a_file_replaced_between_a_counter_read_and_the_ask_is_never_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A failpoint inside the recall: between its counter read and its flight ask the engine
    starts again (a new epoch, same file) or the file is replaced (a new engine's), and a write of
    the scope begins there and is still in flight. The stamp the recall then gives (if any) is
    never given again: while the write is in flight no stamp, and after it every stamp differs."""
    path = prepare(tmp_path)
    assert path is not None
    reader = WriteSignal(path)
    before = reader.stamp("acme")
    asked = write_signal.in_flight
    with contextlib.ExitStack() as stack:

        def the_file_changes(fd: int, bucket: int) -> bool:
            if change == "restarted":
                prepare(tmp_path)
            else:
                fresh = tmp_path / "fresh"
                fresh.mkdir()
                os.replace(prepare(fresh) or "", path)
            stack.enter_context(holder(path, "acme"))  # a write of the new engine, in flight
            return asked(fd, bucket)

        monkeypatch.setattr(write_signal, "in_flight", the_file_changes)
        during = reader.stamp("acme")
        monkeypatch.undo()
        assert during is None or during == before  # the old file: nothing it says is new
        assert reader.stamp("acme") is None  # the new file's flight is seen
    after = reader.stamp("acme")
    assert after is not None and before is not None and after[0] != before[0]
    assert during != after


@pytest.mark.anyio
async def test_a_write_refused_because_the_file_cannot_be_checked_leaves_no_descriptor_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failpoint: checking the opened file fails (an I/O error). The write is refused before it
    began, and the descriptor opened for it is closed: before, each such refusal leaked one, and
    a server refused every write once its descriptors were gone."""
    path = prepare(tmp_path)
    assert path is not None

    def unreadable(fd: int) -> bool:
        raise OSError(errno.EIO, "Input/output error")

    def held() -> int:  # this process's descriptors of the signal file
        fds = Path("/proc/self/fd")
        return sum(1 for fd in fds.iterdir() if os.path.realpath(fd) == str(path.resolve()))

    monkeypatch.setattr(write_signal, "_ours", unreadable)
    for _ in range(3):
        with pytest.raises(StorageError):
            async with WriteSignal(path).writing("acme"):
                raise AssertionError("the write began")
    assert held() == 0
