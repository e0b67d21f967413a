"""docs/configuration.md is generated from the settings models (`mongogate config-doc`): it is up
to date, it names every setting with its environment variable, and the settings the command line
names in its messages are explained there."""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel

from mongogate.cli.config_doc import render
from mongogate.config import Settings
from tests.conftest import Cli
from tests.helpers import ROOT

PAGE = ROOT / "docs" / "configuration.md"


def leaves(model: type[BaseModel] = Settings, prefix: str = "") -> Iterator[str]:
    """Every setting's dotted key, walked here on its own (not with the generator's walk)."""
    for name, info in model.model_fields.items():
        kind = info.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from leaves(kind, f"{prefix}{name}.")
        elif name not in ("query_tools", "api_keys"):  # tables of entries: their own pages
            yield f"{prefix}{name}"


def test_the_page_is_up_to_date() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "run: mongogate config-doc --output docs/configuration.md"
    )


def test_every_setting_appears_with_its_environment_variable() -> None:
    page = PAGE.read_text(encoding="utf-8")
    keys = list(leaves())
    assert len(keys) > 100
    for key in keys:
        section, name = key.rsplit(".", 1)
        env = "MONGOGATE_" + key.upper().replace(".", "__")
        assert f"## `[{section}]`" in page, key
        assert f"| `{name}` | `{env}` |" in page, key


def test_settings_the_command_line_names_are_explained() -> None:
    page = PAGE.read_text(encoding="utf-8").splitlines()
    for key in ("audit.log_queries", "scheduler.worker_ttl_s", "limits.max_argument_depth"):
        env = "MONGOGATE_" + key.upper().replace(".", "__")
        [row] = [line for line in page if f"`{env}`" in line]
        assert row.rstrip(" |").rsplit("|", 1)[1].strip(), f"{key} has no description"


def test_the_command_checks_and_writes(cli: Cli, tmp_path: object) -> None:
    assert cli(["config-doc", "--output", str(PAGE), "--check"]).returncode == 0
    out = cli(["config-doc"])
    assert out.returncode == 0 and out.stdout == render()
