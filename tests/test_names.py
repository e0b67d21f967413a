"""The names a user or a reader follows lead somewhere: every package's `__all__` resolves, and
every module path the "where is it" documents give exists (the renames of 33c5e54 left none
behind; decision records keep old names on purpose, as history)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "mongogate"
PACKAGES = sorted(".".join(("mongogate", *p.parent.relative_to(SRC).parts)) for p in SRC.rglob("__init__.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_a_package_exports_resolves(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in getattr(module, "__all__", ()) if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("doc", ["docs/ARCHITECTURE.md", "docs/API.md", "README.md"])
def test_every_module_path_the_guides_give_exists(doc: str) -> None:
    text = (ROOT / doc).read_text()
    paths = set(re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", text))
    bases = (ROOT, SRC, ROOT / "src")
    modules = {p.name for p in SRC.rglob("*.py")}  # a bare name sits in the directory named beside it
    missing = sorted(
        p
        for p in paths
        if not any((base / p).exists() for base in bases) and not ("/" not in p and p in modules)
    )
    assert missing == []
