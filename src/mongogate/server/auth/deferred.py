"""A JWT verifier of an HS256 secret built at the first token, so that PyJWT and cryptography are
not on the start-up path (`hs256.py` says why; the secret is checked at build without them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mcp.server.auth.provider import AccessToken, TokenVerifier

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import AuthSettings
from mongogate.server.auth.hs256 import secret_bytes

if TYPE_CHECKING:
    from mongogate.server.auth.jwt_verifier import JwtVerifier

__all__ = ["DeferredJwtVerifier"]


class DeferredJwtVerifier(TokenVerifier):
    """A JWT verifier of an HS256 secret whose secret is checked now and whose `JwtVerifier`
    (PyJWT, cryptography) is built at the first token."""

    def __init__(self, auth: AuthSettings, *, clock: Clock = SYSTEM_CLOCK) -> None:
        secret_bytes(auth)
        self._auth = auth
        self._clock = clock
        self._built: JwtVerifier | None = None

    def built(self) -> JwtVerifier:
        """The verifier, built at the first call (PyJWT's own check of the secret runs then)."""
        if self._built is None:
            from mongogate.server.auth.jwt_verifier import JwtVerifier

            self._built = JwtVerifier(self._auth, clock=self._clock)
        return self._built

    async def verify_token(self, token: str) -> AccessToken | None:
        return await self.built().verify_token(token)
