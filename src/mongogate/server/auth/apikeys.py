"""API keys: each maps, by its SHA-256 digest, to a tenant, a subject and scopes.

Keys are never held in clear: the configuration lists digests, a presented key is hashed and
compared with every entry in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Sequence

from mcp.server.auth.provider import AccessToken, TokenVerifier

from mongogate.config import ApiKeyEntry
from mongogate.server.auth.challenge import note_rejection
from mongogate.server.auth.reasons import Reason

__all__ = ["MAX_TOKEN_CHARS", "ApiKeyVerifier", "api_key_access_token", "hash_api_key", "session_owner"]

logger = logging.getLogger(__name__)

#: Bearer tokens longer than this are refused before any parsing (cheap DoS guard).
MAX_TOKEN_CHARS = 16 * 1024


def hash_api_key(key: str) -> str:
    """The hex SHA-256 digest stored in ``[[auth.api_keys]] sha256`` (the key itself is never stored)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def session_owner(kind: str, tenant: str, subject: str) -> str:
    """The identity the SDK compares to bind an MCP session to its caller (as ``client_id``).

    Tenant and subject are both in it, JSON-encoded so that no choice of names can make two
    different pairs read the same: another tenant's token with the same ``sub`` is another owner.
    """
    return json.dumps([kind, tenant, subject], ensure_ascii=True, separators=(",", ":"))


class ApiKeyVerifier(TokenVerifier):
    """Maps API keys, by SHA-256 digest, to a tenant, subject and scopes; keys are never held in clear."""

    def __init__(self, entries: Sequence[ApiKeyEntry]) -> None:
        # AuthSettings refuses mode 'api_keys' without entries; with none, no key passes
        self._entries = tuple(entries)

    def lookup(self, key: str) -> ApiKeyEntry | None:
        """The entry whose digest matches ``key``; every entry is compared, in constant time each."""
        if not key or len(key) > MAX_TOKEN_CHARS:
            return None
        digest = hash_api_key(key)
        found: ApiKeyEntry | None = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.sha256) and found is None:
                found = entry
        return found

    def verify(self, key: str) -> AccessToken | None:
        """Synchronous form of ``verify_token``."""
        entry = self.lookup(key)
        if entry is None:
            logger.info("API key rejected: no [[auth.api_keys]] entry matches its digest")
            note_rejection(Reason.UNKNOWN_API_KEY)
            return None
        return api_key_access_token(key, entry)

    async def verify_token(self, token: str) -> AccessToken | None:
        """TokenVerifier protocol: None makes the SDK answer 401 with WWW-Authenticate."""
        return self.verify(token)


def _api_key_subject(entry: ApiKeyEntry) -> str:
    # A digest prefix identifies the key in audit logs without revealing it.
    return entry.subject or f"apikey:{entry.sha256[:12]}"


def api_key_access_token(key: str, entry: ApiKeyEntry) -> AccessToken:
    subject = _api_key_subject(entry)
    return AccessToken(
        token=key,
        client_id=session_owner("api_key", entry.tenant, subject),
        scopes=list(entry.scopes),
        expires_at=None,
        subject=subject,
        claims={"tenant": entry.tenant, "iss": None},
    )
