"""Every pymongo client mongogate makes, and the one-line error when a server does not answer.

One factory (``mongo_client`` / ``async_mongo_client``): each client names itself to the server
as ``DriverInfo("mongogate", version)`` (visible in the server's logs and ``currentOp``) and
follows the same timeout rules: the URI's own ``serverSelectionTimeoutMS`` and
``connectTimeoutMS`` are honoured, ``database.timeout_ms`` applies to what it does not set
(mongogate/mongouri.py ``client_options``). An unreachable or refused server is one StorageError
naming its hosts, the setting it came from and the timeout used, never pymongo's topology dump.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from pymongo import AsyncMongoClient, MongoClient
from pymongo.driver_info import DriverInfo
from pymongo.errors import ConfigurationError, ConnectionFailure, InvalidURI, PyMongoError

from mongogate.config import DatabaseSettings
from mongogate.errors import ConfigError, StorageError
from mongogate.mongouri import client_options, unreachable, without_password
from mongogate.values import Doc
from mongogate.version import __version__

log = logging.getLogger(__name__)

#: how every client of mongogate introduces itself to the server (the handshake's driver info)
DRIVER = DriverInfo("mongogate", __version__)


def mongo_client(uri: str, timeout_ms: int, **options: Any) -> MongoClient[Doc]:
    """A synchronous client (the audit sink's writer thread, the CLI)."""
    return MongoClient(uri, driver=DRIVER, **client_options(uri, timeout_ms), **options)


def async_mongo_client(uri: str, timeout_ms: int, **options: Any) -> AsyncMongoClient[Doc]:
    """An asyncio client (the server's memory and query clients)."""
    return AsyncMongoClient(uri, driver=DRIVER, **client_options(uri, timeout_ms), **options)


def connect(
    uri: str, settings: DatabaseSettings, listeners: Sequence[Any] = ()
) -> tuple[AsyncMongoClient[Doc], AsyncMongoClient[Doc]]:
    """(memory client, query client); the query client uses ``database.query_uri`` when set.
    Without one (or with the same URI) both are one client: a second would connect and
    authenticate again as the same user with the same options, a third of a warm open of the
    embedded engine (benchmarks/startup.py). ``listeners``: pymongo command listeners on both
    (the traces' database spans)."""
    timeout = settings.timeout_ms
    query_uri = settings.query_uri or uri
    clients: list[AsyncMongoClient[Doc]] = []
    heard = {"event_listeners": list(listeners)} if listeners else {}
    for key, u in (("database.uri", uri), ("database.query_uri", query_uri))[: 1 if query_uri == uri else 2]:
        try:
            clients.append(async_mongo_client(u, timeout, **heard))
        except (InvalidURI, ConfigurationError) as e:  # e.g. a mongodb+srv:// name that does not resolve
            raise ConfigError(f"{key}: {without_password(str(e))}") from e
    return clients[0], clients[-1]


async def ping(client: AsyncMongoClient[Doc], uri: str, key: str, settings: DatabaseSettings) -> None:
    """Ask the server for a ping; a failure is one line (the driver's detail goes to the log)."""
    try:
        await client.admin.command("ping")
    except PyMongoError as e:
        what, advice = unreachable(uri, key, settings.timeout_ms)
        log.info("%s: %s", what, without_password(str(e)))
        if not isinstance(e, ConnectionFailure):  # it answered, but refused (auth, TLS...)
            advice = f"the server refused: {without_password(str(e)).splitlines()[0][:300]}"
        raise StorageError(what, advice=advice) from e
