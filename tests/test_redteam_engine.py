"""Red-team attacks on the engine's data directory: stale state, other users' files, symlinks.

No engine process is needed for most: the attacks are on the files a starter trusts. The
"other user" cases chown files to `nobody` and so run only as root (skipped otherwise).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mongogate.engine import client as engine_client
from mongogate.engine.files import (
    CREDENTIALS_FILE,
    DB_FILE,
    ENGINE_LOCK,
    STATE_FILE,
    EngineState,
    open_lock,
    secure_dir,
    try_lock,
    write_private,
)
from mongogate.errors import ConfigError

NOBODY = 65534
as_root = pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")

#: a process that blocks SIGTERM, so a signal sent to it stays pending (and is seen, not raced)
_VICTIM = (
    "import signal, sys\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})\n"
    "print('ready', flush=True)\n"
    "sys.stdin.readline()\n"
    "print(signal.SIGTERM in signal.sigpending(), flush=True)\n"
)


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[str]]:
    p = subprocess.Popen(
        [sys.executable, "-c", _VICTIM], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    try:
        yield p
    finally:
        p.kill()
        p.communicate()  # closes the pipes


def _stale_state(data: Path, pid: int) -> None:
    state = EngineState(pid, "127.0.0.1", 1, str(data / DB_FILE), "SCRAM-SHA-256", 300.0, 0.0)
    write_private(data / STATE_FILE, state.as_dict())


def test_stop_never_signals_the_pid_named_by_a_stale_engine_json(
    tmp_path: Path, victim: subprocess.Popen[str]
) -> None:
    """A crashed engine left engine.json (its pid now reused by `victim`); a new engine holds
    engine.lock and is still starting. `engine stop` must not SIGTERM the unrelated process."""
    data = tmp_path / "data"
    secure_dir(data)
    _stale_state(data, victim.pid)
    with open_lock(data / ENGINE_LOCK) as lock:  # the starting engine (this process)
        assert try_lock(lock)
        lock.write(f"mongogate engine pid {os.getpid()}\n")
        lock.flush()
        assert engine_client.status(data) is None  # not the stale state
        assert engine_client.stop(data, timeout_s=0.1) is False  # nothing it may signal yet
    assert victim.stdin is not None and victim.stdout is not None
    victim.stdin.write("\n")
    victim.stdin.flush()
    assert victim.stdout.readline().strip() == "False", "stop() sent SIGTERM to an unrelated process"


@as_root
def test_a_data_dir_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    """Another user's directory (here world-writable too) can never be private to us."""
    data = tmp_path / "theirs"
    data.mkdir(mode=0o777)
    os.chmod(data, 0o777)
    os.chown(data, NOBODY, NOBODY)
    with pytest.raises(ConfigError, match="another user"):
        secure_dir(data)
    with pytest.raises(ConfigError, match="another user"):
        engine_client.lease(data, 300)
    assert not (data / CREDENTIALS_FILE).exists()


@as_root
def test_credentials_planted_by_another_user_before_the_dir_was_private_are_refused(tmp_path: Path) -> None:
    """Our directory was world-writable for a while: another user planted engine.credentials
    with a password they know. Tightening the directory must not then trust their file."""
    data = tmp_path / "data"
    data.mkdir(mode=0o777)
    os.chmod(data, 0o777)
    planted = data / CREDENTIALS_FILE
    planted.write_text('{"user": "mongogate", "password": "known-to-the-attacker"}')
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(ConfigError, match="another user"):
        secure_dir(data)
    assert data.stat().st_mode & 0o777 == 0o700  # still tightened


@pytest.mark.parametrize("name", [DB_FILE, STATE_FILE, f".{STATE_FILE}.{os.getpid()}", "engine.log"])
def test_a_symlink_planted_in_the_data_dir_is_refused(tmp_path: Path, name: str) -> None:
    """A symlink where mongogate writes (the SQLite file, engine.json or its temp file, the log)
    would make the engine write every tenant's rows, or truncate a file, somewhere else."""
    data = tmp_path / "data"
    data.mkdir(mode=0o777)
    target = tmp_path / "elsewhere"
    target.write_text("precious")
    (data / name).symlink_to(target)
    with pytest.raises(ConfigError, match="symlink"):
        secure_dir(data)
    assert target.read_text() == "precious"


def test_the_state_file_is_written_without_following_a_symlink(tmp_path: Path) -> None:
    """write_private's temp name is predictable (pid): a symlink there is not followed."""
    data = tmp_path / "data"
    secure_dir(data)
    target = tmp_path / "elsewhere"
    target.write_text("precious")
    (data / f".{STATE_FILE}.{os.getpid()}").symlink_to(target)
    with pytest.raises(OSError):
        write_private(data / STATE_FILE, {"a": 1})
    assert target.read_text() == "precious"


def test_the_password_appears_nowhere_but_the_credentials_file(tmp_path: Path) -> None:
    """A real engine, a good and a bad login: the password is not in engine.json, engine.log,
    engine.lock, the engine's command line or environment (what `ps e` shows other users)."""
    from pymongo import MongoClient
    from pymongo.errors import OperationFailure

    from mongogate.engine.files import credentials

    data = tmp_path / "data"
    lease = engine_client.lease(data, 300)
    lease.release()
    try:
        password = credentials(data)
        good: MongoClient[dict[str, object]] = MongoClient(lease.uri, serverSelectionTimeoutMS=30000)
        bad: MongoClient[dict[str, object]] = MongoClient(
            lease.uri.replace(password, password[:-2] + "xx"), serverSelectionTimeoutMS=30000
        )
        try:
            good.e.c.insert_one({"x": 1})
            with pytest.raises(OperationFailure):
                bad.admin.command("ping")
        finally:
            good.close()
            bad.close()
        proc = Path(f"/proc/{lease.state.pid}")
        seen = {p.name: p.read_bytes() for p in data.iterdir() if p.name != CREDENTIALS_FILE and p.is_file()}
        if proc.exists():
            seen["cmdline"] = (proc / "cmdline").read_bytes()
            seen["environ"] = (proc / "environ").read_bytes()
        leaked = [name for name, text in seen.items() if password.encode() in text]
        assert not leaked, f"the engine password is in {leaked}"
    finally:
        engine_client.stop(data)


def test_mongogate_audit_prints_caller_text_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Terminal escapes and a fake JSON line in a refused filter (and a token's `sub`) come out
    of `mongogate audit` escaped: one line per event, no raw control character."""
    import json

    from mongogate.audit.log import AuditLog
    from mongogate.cli import main

    path = tmp_path / "audit.jsonl"
    log = AuditLog(path, stream=None, redact_values=False, max_value_chars=64)
    forged = '\x1b[2J\n{"event":"query","tenant":"globex"}\r'
    log.filter_rejected(
        tool="find_orders", tenant="acme", principal="\x1b]0;owned\x07", reason="field_not_allowed",
        path=f"filter[{json.dumps(forged)}]", filter={forged: 1}, request_id="r1",
    )  # fmt: skip
    log.close()
    cfg = tmp_path / "mongogate.toml"
    cfg.write_text(f'[server]\ndata_dir = "{tmp_path}"\n')
    assert main(["audit", "--path", str(path), "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\r")
    *events, summary = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert [e["request_id"] for e in events] == ["r1"] and "globex" not in summary["summary"]["by_tenant"]
