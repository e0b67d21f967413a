"""The import contracts bite: an import of another domain package's internals fails `make lint`.

Until issue 41 one "protected" contract covered the six domain packages with all six as allowed
importers; import-linter treats an allowed importer as a package (`as_packages`), so any module
of one domain package could import any module of another (`scheduler/core.py` importing
`mongogate.runs.service`) and every contract passed. Now each package has its own contract that
allows only itself. The test plants such imports in a copy of the package and runs `lint-imports`
on it with the project's contracts (and, to show the hole, with the contract as it was).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

#: the contract as it was before issue 41 (one for all six packages)
OLD_CONTRACT = """
[tool.importlinter]
root_package = "mongogate"
include_external_packages = true

[[tool.importlinter.contracts]]
name = "Domain packages are used through their __init__ (the names it exports)"
type = "protected"
protected_modules = [
    "mongogate.memory.*", "mongogate.recall.*", "mongogate.policy.*", "mongogate.runs.*",
    "mongogate.scheduler.*", "mongogate.audit.*",
]
allowed_importers = [
    "mongogate.memory", "mongogate.recall", "mongogate.policy", "mongogate.runs",
    "mongogate.scheduler", "mongogate.audit",
]
"""

#: (module that imports, the internal module it reaches, the contract that refuses it)
PLANTED = [
    ("scheduler/core.py", "mongogate.runs.service", "runs is used through its __init__"),
    ("audit/forbidden.py", "mongogate.policy.filters", "policy is used through its __init__"),
    ("runs/service.py", "mongogate.memory.keys", "memory is used through its __init__"),
]


def lint(tmp: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tmp / "src")}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(config)],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def planted_copy(tmp: Path, importer: str, imported: str) -> None:
    shutil.copytree(
        ROOT / "src" / "mongogate", tmp / "src" / "mongogate", ignore=shutil.ignore_patterns("__pycache__")
    )
    module = tmp / "src" / "mongogate" / importer
    module.write_text(
        module.read_text(encoding="utf-8") + f"\nimport {imported}  # planted\n", encoding="utf-8"
    )


@pytest.mark.parametrize(("importer", "imported", "contract"), PLANTED)
def test_a_domain_packages_internals_imported_by_another_break_its_contract(
    tmp_path: Path, importer: str, imported: str, contract: str
) -> None:
    planted_copy(tmp_path, importer, imported)
    r = lint(tmp_path, ROOT / "pyproject.toml")
    assert r.returncode != 0, r.stdout
    assert f"{contract} BROKEN" in r.stdout
    mod = "mongogate." + importer.removesuffix(".py").replace("/", ".")
    assert f"{mod} -> {imported}" in r.stdout


def test_the_single_contract_let_the_same_import_through(tmp_path: Path) -> None:
    importer, imported, _ = PLANTED[0]
    planted_copy(tmp_path, importer, imported)
    old = tmp_path / "old.toml"
    old.write_text(OLD_CONTRACT, encoding="utf-8")
    r = lint(tmp_path, old)
    assert r.returncode == 0 and "KEPT" in r.stdout, r.stdout


def test_the_tree_as_it_is_keeps_every_contract() -> None:
    r = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stdout
    assert "BROKEN" not in r.stdout
