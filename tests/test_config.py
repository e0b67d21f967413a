"""Configuration fails fast, naming the file, the key and what was expected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mongogate.config import load_settings
from mongogate.config_errors import mask
from mongogate.errors import ConfigError
from mongogate.specs import QueryToolSpec
from mongogate.tools.registry import ToolRegistry

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
        ("[database]\nurl = 'x'\n", ["database.url", "unknown key 'url'; did you mean 'uri'?"]),
        ("[servr]\nport = 1\n", ["servr", "unknown key 'servr'; did you mean 'server'?"]),
        (tool(extra='descripton = "x"'), ["query_tools.0.descripton", "did you mean 'description'?"]),
        (
            "[database]\nuri = 'postgres://x'\n",
            ["database.uri", "mongodb:// or mongodb+srv://", "postgres://"],
        ),
        (
            "[database]\nquery_uri = 'mongodb://h:99999/'\n",
            ["database.query_uri", "valid MongoDB connection"],
        ),
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
    # issue 20.6: a file without server.data_dir keeps the data directory next to itself
    assert s.audit_path == tmp_path / ".mongogate" / "audit.jsonl"


def test_example_config_is_valid() -> None:
    s = load_settings(Path(__file__).resolve().parent.parent / "examples" / "mongogate.toml")
    assert s.auth.mode == "jwt" and [t.name for t in s.query_tools] == ["find_orders"]


RAW_KEY = "mg_live_4f9c2a7e1b3d5f60"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"[auth]\nmode = 'api_keys'\n[[auth.api_keys]]\nsha256 = '{RAW_KEY}'\ntenant = 'a'\n", RAW_KEY),
        ("[auth]\njwt_secret = 31415926535897932\n", "31415926535897932"),
    ],
)
def test_config_errors_never_echo_secrets(tmp_path: Path, text: str, secret: str) -> None:
    path = tmp_path / "m.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    message = str(e.value)
    assert secret not in message and "***" in message and str(path) in message


def test_uri_passwords_are_masked() -> None:
    assert mask(("database", "uri"), "mongodb://app:hunter2@db:27017/x") == "'mongodb://app:***@db:27017/x'"
    assert mask(("database", "query_uri"), 5) == "5"
    assert mask(("auth", "jwt_secret"), "s3cret") == "***"


def test_a_bad_environment_value_names_the_variable_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.toml"
    path.write_text("[server]\nport = 8000\n")
    monkeypatch.setenv("MONGOGATE_SERVER__PORT", "eighty")
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    message = str(e.value)
    assert "server.port" in message and "MONGOGATE_SERVER__PORT" in message and "'eighty'" in message
    assert str(path) not in message


def test_paths_in_the_file_are_relative_to_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "etc"
    conf.mkdir()
    (conf / "jwks.json").write_text('{"keys": []}')
    path = conf / "m.toml"
    path.write_text(
        "[server]\ndata_dir = 'var/data'\n[audit]\npath = 'logs/audit.jsonl'\n"
        "[auth]\njwks_file = 'jwks.json'\n"
    )
    monkeypatch.chdir(tmp_path)
    s = load_settings(path)
    assert s.server.data_dir == conf / "var" / "data"
    assert s.audit_path == conf / "logs" / "audit.jsonl"
    assert s.auth.jwks_file == conf / "jwks.json"
    path.write_text("[server]\ndata_dir = 'var/data'\n")  # the default audit file follows data_dir
    assert load_settings(path).audit_path == conf / "var" / "data" / "audit.jsonl"
    monkeypatch.setenv("MONGOGATE_SERVER__DATA_DIR", "from-env")  # the environment: as given
    assert load_settings(path).server.data_dir == Path("from-env")


def test_precedence_arguments_then_environment_then_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.toml"
    path.write_text("[server]\nhost = '10.0.0.1'\nport = 1111\nlog_level = 'ERROR'\n")
    monkeypatch.setenv("MONGOGATE_SERVER__PORT", "2222")
    monkeypatch.setenv("MONGOGATE_SERVER__HOST", "10.0.0.2")
    s = load_settings(path, server={"host": "10.0.0.3"})
    assert (s.server.host, s.server.port, s.server.log_level) == ("10.0.0.3", 2222, "ERROR")


def test_config_does_not_import_the_policy_package() -> None:
    code = "import sys, mongogate.config; print(sorted(m for m in sys.modules if m.startswith('mongogate.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "mongogate.policy" not in out and "mongogate.specs" in out


SPEC = {
    "name": "find_things",
    "description": "d",
    "collection": "things",
    "tenant_field": "org",
    "projection": ["a"],
    "fields": {"a": "string"},
}


@pytest.mark.parametrize(
    ("update", "fragments"),
    [
        (
            {"operators": ["$where"]},
            ["query tool 'find_things'", "operators:", "$where", "cannot be allowed"],
        ),
        ({"max_limit": 0}, ["query tool 'find_things'", "max_limit:", "greater than or equal to 1"]),
        ({"name": "1bad"}, ["query tool '1bad'", "name:", "must start with a letter"]),
        ({"projection": ["secret"]}, ["find_things", "projection fields ['secret'] are not declared"]),
    ],
)
def test_a_bad_spec_from_python_is_a_config_error(update: dict[str, object], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as e:
        QueryToolSpec(**{**SPEC, **update})  # type: ignore[arg-type]
    for fragment in fragments:
        assert fragment in str(e.value)


def test_registry_applies_the_config_rules(tmp_path: Path) -> None:
    registry = ToolRegistry(run_tools=False)
    registry.add_query_tool(QueryToolSpec(**SPEC))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="clashes with the built-in tool 'append'"):
        registry.add_query_tool(QueryToolSpec(**{**SPEC, "name": "append"}))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="duplicate tool name 'find_things'"):
        registry.add_query_tool(QueryToolSpec(**SPEC))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="takes a QueryToolSpec, got dict"):
        registry.add_query_tool(SPEC)  # type: ignore[arg-type]
    narrow = load_settings(None, policy={"allowed_operators": ["$eq"]}, server={"data_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match=r"operators \[.*'\$in'.*\] are outside policy.allowed_operators"):
        registry.build(narrow)


def test_bad_environment_value_names_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A value the environment source cannot parse (a list needs JSON) names its variable, not the file."""
    path = tmp_path / "mongogate.toml"
    path.write_text("[server]\nport = 8000\n")
    monkeypatch.setenv("MONGOGATE_SERVER__ALLOWED_HOSTS", "a.example")
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    assert "MONGOGATE_SERVER__ALLOWED_HOSTS" in str(e.value) and str(path) not in str(e.value)
    monkeypatch.delenv("MONGOGATE_SERVER__ALLOWED_HOSTS")
    monkeypatch.setenv("MONGOGATE_SERVER__PORT", "abc")
    monkeypatch.setenv("MONGOGATE_SERVER__PORTT", "1")
    with pytest.raises(ConfigError) as e:
        load_settings(path)
    text = str(e.value)
    assert "server.port (from environment variable MONGOGATE_SERVER__PORT)" in text
    assert "MONGOGATE_SERVER__PORTT" in text and "did you mean 'port'?" in text
    assert str(path) not in text


def test_uri_without_scheme_or_with_password_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MONGOGATE_DATABASE__URI", "postgres://app:hunter2@db/x")
    with pytest.raises(ConfigError) as e:
        load_settings(None)
    assert "MONGOGATE_DATABASE__URI" in str(e.value) and "hunter2" not in str(e.value)


def test_uri_timeout_is_honoured() -> None:
    from mongogate.mongouri import client_options, selection_timeout

    uri = "mongodb://h1:27017,h2/?replicaSet=rs0&serverSelectionTimeoutMS=750"
    assert selection_timeout(uri, 5000) == (750, "serverSelectionTimeoutMS in the URI")
    assert "serverSelectionTimeoutMS" not in client_options(uri, 5000)  # a keyword would override the URI
    assert selection_timeout("mongodb://h/", 5000) == (5000, "database.timeout_ms")
    assert client_options("mongodb://h/", 5000)["serverSelectionTimeoutMS"] == 5000


def test_spec_error_through_the_python_api_names_spec_key_and_expectation() -> None:
    """What examples/embed.py hit: a ConfigError naming the tool, the key and the fix, not `(spec)`."""
    with pytest.raises(ConfigError) as e:
        QueryToolSpec(
            name="recent_big_orders",
            description="d",
            collection="orders",
            tenant_field="userId",
            projection=["number", "total"],
            fields={"total": "number"},
        )
    text = str(e.value)
    assert "query tool 'recent_big_orders'" in text
    assert "  projection: projection fields ['number'] are not declared in `fields`" in text
    assert "declare each there with its type, or drop it from `projection`" in text
    with pytest.raises(
        ConfigError, match=r"descripton: unknown key 'descripton'; did you mean 'description'"
    ):
        QueryToolSpec(name="t", descripton="d")  # type: ignore[call-arg]


def test_the_server_keeps_an_idle_connection_longer_than_the_sdks_client_does() -> None:
    """httpx, under the MCP SDK's HTTP client, drops a connection idle for 5 s; a server closing
    it after the same 5 s raced the client's next POST on it, which failed with a ReadError the
    SDK does not retry, ending the client (CI met it). By default the server outlives the
    client's expiry, so the client drops an idle connection first; idle ones still make room
    when `max_connections` is reached."""
    import httpx2

    sdk_expiry = httpx2.Limits().keepalive_expiry
    assert sdk_expiry is not None
    assert load_settings(None).server.keep_alive_timeout_s >= 5 * sdk_expiry
