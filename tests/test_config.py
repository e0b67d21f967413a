"""Configuration fails fast, naming the file, the key and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from mongogate.config import load_settings
from mongogate.errors import ConfigError

TOOL = """
[[query_tools]]
name = "{name}"
description = "d"
collection = "orders"
tenant_field = "userId"
projection = {projection}
fields = {{ status = "string", total = "number" }}
{extra}
"""


def tool(name: str = "find_orders", projection: str = '["status"]', extra: str = "") -> str:
    return TOOL.format(name=name, projection=projection, extra=extra)


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("[memory]\nmax_context_limit = 0\n", ["memory.max_context_limit", "greater than or equal to 1"]),
        ("[database]\nurl = 'x'\n", ["database.url", "Extra inputs are not permitted"]),
        ("[auth]\nmode = 'magic'\n", ["auth.mode", "'none', 'jwt' or 'api_keys'"]),
        ("[auth]\nmode = 'jwt'\n", ["exactly one of jwt_secret, jwt_public_key_file, jwks_file"]),
        (
            "[auth]\nmode = 'api_keys'\n[[auth.api_keys]]\nsha256 = 'abc'\ntenant = 'a'\n",
            ["sha256", "64-character"],
        ),
        (tool() + tool(), ["duplicate tool name 'find_orders'"]),
        (tool(name="append"), ["clashes with the built-in tool 'append'"]),
        (tool(extra='operators = ["$where"]'), ["query_tools.0.operators", "$where"]),
        (tool(projection="[]"), ["query_tools.0.projection", "at least 1 item"]),
        (tool(projection='["secret"]'), ["projection fields ['secret'] are not declared"]),
        (tool(extra="sort = { createdAt = -1 }"), ["sort fields ['createdAt'] are not declared"]),
        (
            tool().replace('status = "string"', 'userId = "string", status = "string"'),
            ["tenant_field 'userId' must not be a filterable field"],
        ),
        ("[policy]\nallowed_operators = ['$eq', '$expr']\n", ["policy.allowed_operators", "$expr"]),
        ("this is not toml", ["is not valid TOML"]),
    ],
)
def test_bad_config_names_file_key_and_expectation(tmp_path: Path, text: str, fragments: list[str]) -> None:
    path = tmp_path / "mongogate.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    message = str(e.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="does not exist; pass --config PATH or set MONGOGATE_CONFIG"):
        load_settings("/nonexistent/mongogate.toml")


def test_environment_overrides_the_file_key_by_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.toml"
    path.write_text("[auth]\nmode = 'none'\ntenant = 'from-file'\nsubject = 'file-subject'\n" + tool())
    monkeypatch.setenv("MONGOGATE_AUTH__TENANT", "from-env")
    monkeypatch.setenv("MONGOGATE_CONFIG", str(path))
    s = load_settings()
    assert (s.auth.tenant, s.auth.subject) == ("from-env", "file-subject")
    assert [t.name for t in s.query_tools] == ["find_orders"]
    assert s.audit_path == Path(".mongogate") / "audit.jsonl"


def test_example_config_is_valid() -> None:
    s = load_settings(Path(__file__).resolve().parent.parent / "examples" / "mongogate.toml")
    assert s.auth.mode == "jwt" and [t.name for t in s.query_tools] == ["find_orders"]
