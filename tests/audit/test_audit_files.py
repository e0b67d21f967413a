"""Audit files and data directories other local users cannot redirect (issue 19, section 4).

Another user is uid 65534 (nobody): these tests run as root, or skip, since only root can give
a file away (chown) to stage what that user would have planted."""

from __future__ import annotations

import io
import os
import subprocess
from pathlib import Path

import pytest

from mongogate.audit.log import AuditLog
from mongogate.audit.read import read_events
from mongogate.engine.files import secure_dir
from mongogate.errors import ConfigError
from tests.helpers import EXE, ROOT

NOBODY = 65534
needs_root = pytest.mark.skipif(os.getuid() != 0, reason="staging another user's file needs chown (root)")


def _log(path: Path, stream: io.StringIO | None = None) -> AuditLog:
    return AuditLog(path, redact_values=False, max_value_chars=64, stream=stream)


def _reject(log: AuditLog, n: int = 0) -> None:
    log.filter_rejected(
        tool="find_orders",
        tenant="acme",
        principal="alice",
        reason="operator_not_allowed",
        path="filter.$where",
        filter={"$where": str(n)},
        request_id=f"r{n}",
    )


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700)
    return path


@needs_root
def test_a_planted_audit_file_of_another_user_is_not_appended_to(tmp_path: Path) -> None:
    """Was: a planted audit.jsonl (0666, another user's) was appended to."""
    d = _private_dir(tmp_path / "d")
    planted = d / "audit.jsonl"
    planted.write_text("planted\n")
    os.chown(planted, NOBODY, NOBODY)
    planted.chmod(0o666)
    errors = io.StringIO()
    log = _log(planted, errors)
    _reject(log)
    log.close()
    assert planted.read_text() == "planted\n"  # nothing of ours reached their file
    assert "cannot write audit log" in errors.getvalue() and "belongs to another user" in errors.getvalue()
    with pytest.raises(ConfigError, match=r"belongs to another user \(uid 65534\)"):
        _log(planted).check()  # and the server's start-up says so


def test_a_planted_symlink_is_not_followed(tmp_path: Path) -> None:
    """Was: the audit writer followed audit.jsonl -> target, chmodded the target and wrote it."""
    d = _private_dir(tmp_path / "d")
    target = tmp_path / "target"
    target.write_text("precious\n")
    target.chmod(0o644)
    (d / "audit.jsonl").symlink_to(target)
    errors = io.StringIO()
    log = _log(d / "audit.jsonl", errors)
    _reject(log)
    log.close()
    assert target.read_text() == "precious\n" and target.stat().st_mode & 0o777 == 0o644
    assert "is a symlink" in errors.getvalue()
    with pytest.raises(ConfigError, match="is a symlink"):
        _log(d / "audit.jsonl").check()


@pytest.mark.parametrize(
    ("mode", "group"),
    [(0o777, None), (0o1777, None), pytest.param(0o775, NOBODY, marks=needs_root, id="group-of-others")],
)
def test_a_directory_other_users_can_write_is_refused(tmp_path: Path, mode: int, group: int | None) -> None:
    """The directory holding the audit file: not writable by anyone else, sticky or not."""
    d = tmp_path / "open"
    d.mkdir()
    d.chmod(mode)
    if group is not None:
        os.chown(d, -1, group)
    with pytest.raises(ConfigError, match=r"audit.path: .*open is writable by other users"):
        _log(d / "audit.jsonl").check()


def test_a_user_private_group_may_write(tmp_path: Path) -> None:
    """umask 002 systems make directories 0775 with the user's own group: nobody else is in it."""
    import grp
    import pwd

    me = pwd.getpwuid(os.getuid()).pw_name
    group = grp.getgrgid(os.getgid())
    if group.gr_name != me or set(group.gr_mem) - {me}:
        pytest.skip("the primary group is not a user-private group here")
    d = tmp_path / "mine"
    d.mkdir()
    d.chmod(0o775)
    _log(d / "audit.jsonl").check()


def test_a_parent_other_users_can_write_is_refused_unless_sticky(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # anyone may rename "data" away and put their own in its place
    with pytest.raises(ConfigError, match=r"server.data_dir: .*shared is writable by other users"):
        secure_dir(shared / "data")
    assert not (shared / "data").exists()
    shared.chmod(0o1777)  # sticky, like /tmp: only we can rename or remove what is ours
    secure_dir(shared / "data")
    assert (shared / "data").stat().st_mode & 0o777 == 0o700


@needs_root
def test_a_data_dir_symlink_planted_by_another_user_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    mine = _private_dir(tmp_path / "mine")
    (shared / "data").symlink_to(mine)
    os.chown(shared / "data", NOBODY, NOBODY, follow_symlinks=False)
    with pytest.raises(ConfigError, match=r"symlink owned by another user \(uid 65534\)"):
        secure_dir(shared / "data")
    with pytest.raises(ConfigError, match=r"symlink owned by another user \(uid 65534\)"):
        _log(shared / "data" / "audit.jsonl").check()


def test_a_directory_re_pointed_after_the_check_is_not_followed(tmp_path: Path) -> None:
    """Was: the writer reopened the file by name, so a data-directory symlink re-pointed after the
    check (here between two writes, the file closed in between) sent the next event elsewhere."""
    real, elsewhere = _private_dir(tmp_path / "real"), _private_dir(tmp_path / "elsewhere")
    data = tmp_path / "data"
    data.symlink_to(real)
    log = _log(data / "audit.jsonl")
    _reject(log, 1)
    log.close()  # the file is closed; the next event opens it again
    data.unlink()
    data.symlink_to(elsewhere)
    _reject(log, 2)
    log.close()
    assert [e["request_id"] for e in read_events(real / "audit.jsonl")] == ["r1", "r2"]
    assert not (elsewhere / "audit.jsonl").exists()


def test_our_own_loose_file_is_tightened_and_appended(tmp_path: Path) -> None:
    d = _private_dir(tmp_path / "d")
    (d / "audit.jsonl").write_text("")
    (d / "audit.jsonl").chmod(0o666)
    log = _log(d / "audit.jsonl")
    _reject(log)
    log.close()
    assert (d / "audit.jsonl").stat().st_mode & 0o777 == 0o600
    assert len(list(read_events(d / "audit.jsonl"))) == 1


def test_serve_refuses_an_audit_directory_others_can_write(tmp_path: Path) -> None:
    """The real command line: one clear line at start-up, exit status 2, nothing served."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOGATE_")} | {
        "MONGOGATE_SERVER__DATA_DIR": str(tmp_path / "data"),
        "MONGOGATE_AUDIT__PATH": str(shared / "audit.jsonl"),
        "MONGOGATE_AUTH__TENANT": "acme",
    }
    run = {"env": env, "cwd": ROOT, "capture_output": True, "text": True, "timeout": 120}
    r = subprocess.run([*EXE, "serve"], stdin=subprocess.DEVNULL, **run)  # type: ignore[call-overload]
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("mongogate: audit.path: ") and "writable by other users" in r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not (shared / "audit.jsonl").exists()


def test_a_directory_that_cannot_be_created_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"audit.path: .*file is not a directory"):
        _log(tmp_path / "file" / "audit.jsonl").check()
    if os.getuid() != 0:  # root may write anywhere
        ro = _private_dir(tmp_path / "ro")
        ro.chmod(0o500)
        try:
            with pytest.raises(ConfigError, match=r"audit.path: cannot use .*: Permission denied"):
                _log(ro / "sub" / "audit.jsonl").check()
        finally:
            ro.chmod(0o700)
