"""The locks in requirements/ are current, agree with each other, and are what is installed.

`make run` and `make test` install requirements/run.txt and requirements/test.txt (exact versions,
hashes); `make lock` writes them from pyproject.toml (requirements/lock.py). A fresh clone must
resolve exactly what passed here, not whatever the registry holds that day.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType

import pytest
from packaging.markers import Marker

from mongogate.compat import WRAPPED

ROOT = Path(__file__).resolve().parent.parent


def _lock_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mongogate_lock", ROOT / "requirements" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up by name
    spec.loader.exec_module(module)
    return module


LOCK = _lock_module()


@pytest.mark.parametrize("name", ["run.txt", "test.txt"])
def test_each_lock_was_resolved_from_todays_pyproject(name: str) -> None:
    """pyproject.toml's dependencies, extras or build requirements changed without `make lock`."""
    path = ROOT / "requirements" / name
    assert LOCK.recorded_digest(path) == LOCK.inputs_digest(), (
        f"requirements/{name} is stale: pyproject.toml's dependencies changed since it was written; "
        "run `make lock` and commit requirements/"
    )


def test_the_digest_follows_every_input(tmp_path: Path) -> None:
    """An extra's new dependency, a moved range and a new build requirement each change the digest."""
    original = (ROOT / "pyproject.toml").read_text()
    edits = [
        original.replace('"anyio>=4.4,<5"', '"anyio>=4.5,<5"'),
        original.replace('bench = ["apscheduler>=3.11,<4"]', 'bench = ["apscheduler>=3.11,<4", "six"]'),
        original.replace('requires = ["setuptools>=77"]', 'requires = ["setuptools>=78"]'),
    ]
    digests = {LOCK.inputs_digest(ROOT / "pyproject.toml")}
    for i, text in enumerate(edits):
        assert text != original, f"edit {i} matched nothing in pyproject.toml"
        path = tmp_path / f"pyproject{i}.toml"
        path.write_text(text)
        digests.add(LOCK.inputs_digest(path))
    assert len(digests) == 1 + len(edits)


def test_every_pin_has_a_hash() -> None:
    for name in ("run.txt", "test.txt"):
        text = (ROOT / "requirements" / name).read_text()
        blocks = re.split(r"\n(?=[A-Za-z0-9])", text)
        pins = [b for b in blocks if "==" in b.splitlines()[0]]
        assert pins, name
        assert all("--hash=sha256:" in b for b in pins), name


def test_run_lock_is_the_test_locks_versions() -> None:
    """`make run` then `make test` (or the reverse) moves no version."""
    run = LOCK.read_lock(ROOT / "requirements" / "run.txt")
    test = LOCK.read_lock(ROOT / "requirements" / "test.txt")
    test_versions: dict[str, set[str]] = {}
    for (name, _), pin in test.items():
        test_versions.setdefault(name, set()).add(pin.version)
    assert run
    differ = [
        f"{n}=={p.version}" for (n, _), p in run.items() if p.version not in test_versions.get(n, set())
    ]
    assert not differ, f"run.txt pins what test.txt does not: {differ}; run `make lock`"
    assert ("mongoeco", "") in run and ("pytest", "") not in run  # the engine to run, no test tools


def _applies(marker: str) -> bool:
    return not marker or Marker(marker).evaluate()


def test_installed_versions_are_the_locks() -> None:
    """Every locked package that applies to this interpreter is installed at its locked version."""
    wrong = []
    for (name, marker), pin in LOCK.read_lock(ROOT / "requirements" / "test.txt").items():
        if not _applies(marker):
            continue
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = "not installed"
        if installed != pin.version:
            wrong.append(f"{name}: {installed} (locked {pin.version})")
    assert not wrong, "install from the lock (make setup): " + "; ".join(wrong)


@pytest.mark.parametrize("package", sorted(WRAPPED))
def test_the_lock_pins_what_compat_was_read_against(package: str) -> None:
    """The packages whose internals compat/ wraps: the lock's version is the one the wrapper was
    read against (a `make lock` that moves one past it fails here, naming the wrapper)."""
    wrapper, read_against = WRAPPED[package]
    test_lock = LOCK.read_lock(ROOT / "requirements" / "test.txt")
    locked = [pin.version for (name, _), pin in test_lock.items() if name == LOCK.normalize(package)]
    assert locked, f"{package} is not in requirements/test.txt"
    assert all(v.startswith(read_against) for v in locked), (
        f"the lock moves {package} to {locked}; re-read src/mongogate/compat/{wrapper} "
        f"(read against {read_against}*) and move its entry in mongogate.compat.WRAPPED"
    )
