"""MongoDB connection strings: checked when the config is read, and named when a server is unreachable.

Parsing here never resolves DNS (a `mongodb+srv://` URI is only checked for its shape), so a
config check stays instant; the driver does the rest when it connects.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

from pymongo.errors import ConfigurationError, InvalidURI
from pymongo.uri_parser import parse_uri

SCHEMES = ("mongodb://", "mongodb+srv://")
_TIMEOUT_OPTION = "serverselectiontimeoutms"
_CONNECT_TIMEOUT_OPTION = "connecttimeoutms"
_PASSWORD = re.compile(r"(?<=://)([^/@:]*):[^/@]*@")


def without_password(text: str) -> str:
    """``text`` with the password of any URI in it replaced by ``***``."""
    return _PASSWORD.sub(r"\1:***@", text)


def uri_problem(uri: str) -> str | None:
    """What is wrong with ``uri`` as a MongoDB connection string (one sentence), or None."""
    if not uri.startswith(SCHEMES):
        scheme = uri.split("://", 1)[0] + "://" if "://" in uri else "no scheme"
        return (
            "must be a MongoDB connection string starting with mongodb:// or mongodb+srv:// "
            f"(found {scheme}), e.g. mongodb://user:password@host:27017/?replicaSet=rs0"
        )
    try:
        if uri.startswith("mongodb://"):
            parse_uri(uri)
        else:
            hosts = _hosts_part(uri)
            if not hosts or "," in hosts or ":" in hosts.rsplit("]", 1)[-1]:
                return "a mongodb+srv:// URI names exactly one host name and no port"
            _options(uri, strict=True)
    except (InvalidURI, ConfigurationError, ValueError) as e:
        return f"is not a valid MongoDB connection string: {without_password(str(e))}"
    return None


def _hosts_part(uri: str) -> str:
    rest = uri.split("://", 1)[1]
    hosts = rest.partition("?")[0].partition("/")[0]
    return hosts.rpartition("@")[2]


def _options(uri: str, strict: bool = False) -> dict[str, str]:
    query = uri.partition("?")[2]
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=strict and bool(query))
    return {k.lower(): v for k, v in pairs}


def hosts(uri: str) -> str:
    """The host list of ``uri`` as written (``a:27017,b:27017``), never its credentials."""
    return _hosts_part(uri) or "(no host)"


def selection_timeout(uri: str, default_ms: int) -> tuple[int, str]:
    """The server selection timeout a client of ``uri`` uses, and where it comes from.

    The URI's own ``serverSelectionTimeoutMS`` wins over ``database.timeout_ms``.
    """
    value = _options(uri).get(_TIMEOUT_OPTION)
    if value is not None:
        try:
            return int(float(value)), "serverSelectionTimeoutMS in the URI"
        except ValueError:
            pass
    return default_ms, "database.timeout_ms"


def client_options(uri: str, default_timeout_ms: int) -> dict[str, Any]:
    """Keyword options for a client of ``uri`` (mongogate/connect.py makes every client with
    them): a keyword would override the URI, so each timeout is passed only when the URI does not
    set its own. The connect timeout follows the server selection timeout: no single connection
    attempt may outlast the selection it serves."""
    given = _options(uri)
    opts: dict[str, Any] = {"tz_aware": True}
    if _TIMEOUT_OPTION not in given:
        opts["serverSelectionTimeoutMS"] = default_timeout_ms
    if _CONNECT_TIMEOUT_OPTION not in given:
        opts["connectTimeoutMS"] = default_timeout_ms
    return opts


def unreachable(uri: str, key: str, default_timeout_ms: int) -> tuple[str, str]:
    """(what, advice) for a server that did not answer: the hosts, the key and the timeout used."""
    ms, source = selection_timeout(uri, default_timeout_ms)
    what = f"cannot reach MongoDB at {hosts(uri)} ({key})"
    advice = (
        f"no server answered within {ms} ms ({source}); check that it is running and reachable from "
        "this machine (host, port, firewall, TLS, replicaSet name), or raise the timeout"
    )
    return what, advice
