"""Files other local users cannot redirect: directories reached component by component, files
opened without following symlinks and only when they are ours.

A path is only as safe as every directory on the way to it: whoever can write a directory can
rename what is in it and plant a symlink or a file in its place. So a directory is reached
from ``/`` one component at a time (``O_NOFOLLOW``, each opened relative to the one before);
each must belong to root or to us, and may be writable by other users only if it is sticky
(``/tmp``: others cannot rename or remove what is ours), except the directory that holds our
files, which nobody else may write at all. A group-write bit counts only when the group holds
someone else (a user-private group, as umask 002 systems make, does not). A symlink on the
way is followed only when root or we own it (its directory was checked first, so nobody else
could have put it there). The caller keeps the directory's descriptor and opens files
relative to it: a directory renamed or re-pointed after the check is never followed, the
check holds at the moment of use.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
from pathlib import Path

from mongogate.errors import ConfigError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_MAX_LINKS = 40  # as the kernel's own limit on symlinks in one path


def _trusted(uid: int) -> bool:
    return uid in (0, os.getuid())


def _private_group(gid: int) -> bool:
    """A user-private group (named like us, our primary group, no other members): its write bit
    lets nobody else in (umask 002 makes every directory group-writable on such systems)."""
    try:
        group = grp.getgrgid(gid)
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return False
    return gid == os.getgid() and group.gr_name == me and set(group.gr_mem) <= {me}


def _check_dir(fd: int, shown: str, *, holds_files: bool, what: str) -> None:
    st = os.fstat(fd)
    if not _trusted(st.st_uid):
        raise ConfigError(
            f"{what}: {shown} belongs to another user (uid {st.st_uid}), who could replace what mongogate "
            "writes under it; use a directory owned by you (or root)"
        )
    others_write = st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and not _private_group(st.st_gid))
    if others_write and (holds_files or not st.st_mode & stat.S_ISVTX):
        raise ConfigError(
            f"{what}: {shown} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}), who could "
            f"plant a file or symlink there; run `chmod go-w {shown}` or choose another directory"
        )


def _stat_or_make(fd: int, name: str, shown: Path, *, what: str, create: bool) -> os.stat_result:
    """`name` in directory `fd`, not followed; a missing one made 0700 when `create`."""
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        if not create:
            raise ConfigError(f"{what}: {shown} does not exist") from None
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            os.mkdir(name, 0o700, dir_fd=fd)
        return os.stat(name, dir_fd=fd, follow_symlinks=False)


def _one_more_link(st: os.stat_result, shown: Path, links: int, path: Path, *, what: str) -> int:
    """A symlink on the way, followed only when the user or root owns it, `_MAX_LINKS` at most."""
    if not _trusted(st.st_uid):
        raise ConfigError(
            f"{what}: {shown} is a symlink owned by another user (uid {st.st_uid}); "
            "remove it or use the real path"
        )
    if links + 1 > _MAX_LINKS:
        raise ConfigError(f"{what}: {path} has too many levels of symlinks")
    return links + 1


def _open_child(fd: int, name: str, shown: Path, *, what: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
    except NotADirectoryError:
        raise ConfigError(f"{what}: {shown} is not a directory") from None


def open_dir(path: Path, *, what: str, create: bool = True, holds_files: bool = True) -> int:
    """A descriptor of directory ``path`` (missing components created 0700 when ``create``),
    every component checked as the module says. ``holds_files``: the last one must not be
    writable by anyone else, sticky or not. Raises ConfigError naming ``what`` (a setting)."""
    parts = list(Path(os.path.abspath(path)).parts[1:])
    fd = os.open("/", _DIR_FLAGS)
    shown = Path("/")
    links = 0
    try:
        _check_dir(fd, "/", holds_files=holds_files and not parts, what=what)
        while parts:
            name = parts.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                nfd = os.open("..", _DIR_FLAGS, dir_fd=fd)
                shown = shown.parent
            else:
                st = _stat_or_make(fd, name, shown / name, what=what, create=create)
                if stat.S_ISLNK(st.st_mode):
                    links = _one_more_link(st, shown / name, links, path, what=what)
                    target = os.readlink(name, dir_fd=fd)
                    if target.startswith("/"):
                        os.close(fd)
                        fd = os.open("/", _DIR_FLAGS)
                        shown = Path("/")
                    parts = [p for p in Path(target).parts if p != "/"] + parts
                    continue
                nfd = _open_child(fd, name, shown / name, what=what)
                shown = shown / name
            os.close(fd)
            fd = nfd
            _check_dir(fd, str(shown), holds_files=holds_files and not parts, what=what)
    except OSError as e:  # permission denied, a read-only file system, ...: one line, not a traceback
        os.close(fd)
        raise ConfigError(f"{what}: cannot use {path}: {e.strerror or e}") from e
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_dir_path(path: Path, *, what: str) -> None:
    """Refuse a directory whose parents other users could change, or a planted symlink at ``path``.

    The directory itself (created or tightened to 0700 by its owner) is the caller's to check."""
    fd = open_dir(path.parent, what=what, holds_files=False)
    try:
        st = os.stat(path.name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    finally:
        os.close(fd)
    if stat.S_ISLNK(st.st_mode) and not _trusted(st.st_uid):
        raise ConfigError(
            f"{what}: {path} is a symlink owned by another user (uid {st.st_uid}); "
            "remove it or use the real path"
        )


def open_private_append(dir_fd: int, name: str, shown: Path) -> int:
    """``name`` in the directory ``dir_fd`` opened for appending: created 0600 with O_EXCL, or,
    when it exists, only a regular file of ours with one link (never through a symlink), its
    mode tightened to 0600. Raises ConfigError naming the refused file."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        pass
    try:
        fd = os.open(name, flags | os.O_NONBLOCK, dir_fd=dir_fd)  # a FIFO must not block us
    except OSError as e:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise ConfigError(f"{shown} is a symlink: remove it (mongogate never writes through one)") from e
        raise
    try:
        st = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(st.st_mode):
            problem = "is not a regular file"
        elif not _trusted(st.st_uid):
            problem = f"belongs to another user (uid {st.st_uid})"
        elif st.st_nlink != 1:
            problem = f"has {st.st_nlink} hard links (another name could point at it)"
        if problem is not None:
            raise ConfigError(f"{shown} {problem}: remove it; mongogate appends only to its own file")
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o600)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_private_file(path: Path, *, what: str) -> None:
    """At start-up: ``path``'s directory passes ``open_dir`` and, if the file exists, it is one we
    would append to (nothing is created)."""
    fd = open_dir(path.parent, what=what)
    try:
        try:
            st = os.stat(path.name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise ConfigError(f"{what}: {path} is a symlink: remove it (mongogate never writes through one)")
        try:
            os.close(open_private_append(fd, path.name, path))
        except ConfigError as e:
            raise ConfigError(f"{what}: {e}") from None
    finally:
        os.close(fd)
