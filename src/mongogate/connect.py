"""The two pymongo clients, and the one-line error when a server does not answer.

The URI's own ``serverSelectionTimeoutMS`` is honoured (``database.timeout_ms`` applies only when
the URI sets none); an unreachable or refused server is one StorageError naming its hosts, the
setting it came from and the timeout used, never pymongo's topology dump.
"""

from __future__ import annotations

import logging

from pymongo import AsyncMongoClient
from pymongo.errors import ConfigurationError, ConnectionFailure, InvalidURI, PyMongoError

from mongogate.config import DatabaseSettings
from mongogate.errors import ConfigError, StorageError
from mongogate.mongouri import client_options, unreachable, without_password
from mongogate.values import Doc

log = logging.getLogger(__name__)


def connect(uri: str, settings: DatabaseSettings) -> tuple[AsyncMongoClient[Doc], AsyncMongoClient[Doc]]:
    """(memory client, query client); the query client uses ``database.query_uri`` when set."""
    timeout = settings.timeout_ms
    query_uri = settings.query_uri or uri
    clients: list[AsyncMongoClient[Doc]] = []
    for key, u in (("database.uri", uri), ("database.query_uri", query_uri)):
        try:
            clients.append(AsyncMongoClient(u, **client_options(u, timeout)))
        except (InvalidURI, ConfigurationError) as e:  # e.g. a mongodb+srv:// name that does not resolve
            raise ConfigError(f"{key}: {without_password(str(e))}") from e
    return clients[0], clients[1]


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
