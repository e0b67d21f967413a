"""An older mongogate's code from git, importable beside this tree's (the "previous version" columns).

One copy of what `scheduler_fleet.load_previous`, `turn_trips.py` and `recall_score_cost.py` each
did by hand: read files at a revision and write them as a package under another name, with the
imports that named the original package rewritten.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def show(rev: str, path: str) -> str:
    """The text of `path` (relative to the checkout) at `rev`."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:{path}"], capture_output=True, text=True, check=True
    ).stdout


def python_files(rev: str, folder: str) -> list[str]:
    """The names of the `.py` files directly in `folder` at `rev`."""
    names = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:{folder}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [n for n in names if n.endswith(".py")]


def package_at(
    rev: str,
    folder: str,
    name: str,
    into: Path,
    replace: list[tuple[str, str]],
    extra: dict[str, str] | None = None,
) -> None:
    """Write `folder`'s modules at `rev` as package `name` under `into` (put on `sys.path`), each
    text with `replace`'s pairs applied in order; `extra` maps more files (paths at `rev`) to
    names inside the package."""
    pkg = into / name
    pkg.mkdir()
    files = {f"{folder}/{n}": n for n in python_files(rev, folder)} | (extra or {})
    for path, target in files.items():
        text = show(rev, path)
        for old, new in replace:
            text = text.replace(old, new)
        (pkg / target).write_text(text)
    if str(into) not in sys.path:
        sys.path.insert(0, str(into))


def module_at(rev: str, path: str, name: str, into: Path) -> ModuleType:
    """One module at `rev`, imported as `name` (registered in `sys.modules`: dataclasses look
    their module up there)."""
    file = into / f"{name}.py"
    file.write_text(show(rev, path))
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
