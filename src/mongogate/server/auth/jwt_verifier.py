"""JWT verification: one configured key source, the algorithm pinned by the key.

Imported only when a server verifies JWTs (`verify.build_token_verifier`, a stdio server in
mode 'jwt'): PyJWT and cryptography are not on the start-up path of the other modes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

import anyio
import jwt
from mcp.server.auth.provider import AccessToken, TokenVerifier

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import AuthSettings
from mongogate.errors import ConfigError
from mongogate.server.auth.apikeys import MAX_TOKEN_CHARS, session_owner
from mongogate.server.auth.jwks import KeySource, RemoteJwks, StaticKeys, reason_of
from mongogate.server.auth.reasons import Reason, Rejected, refused, valid_tenant
from mongogate.server.auth.signing_keys import Key, hs256_secret_bytes, load_jwks, load_pem_public_key

__all__ = ["JwtVerifier"]


def _scopes(payload: Mapping[str, Any]) -> list[str]:
    """Scopes from ``scope`` (space-separated, RFC 8693) or ``scp``/``scopes`` (list or space-separated)."""
    for name in ("scope", "scp", "scopes"):
        value = payload.get(name)
        if value is None:
            continue
        if isinstance(value, str):
            return value.split()
        if isinstance(value, list) and all(isinstance(s, str) for s in value):
            return [s for s in value if s]
        raise Rejected(Reason.CLAIMS, f"claim {name!r} must be a string or a list of strings")
    return []


class JwtVerifier(TokenVerifier):
    """Verifies JWTs against one configured key source, with the algorithm pinned by the key.

    The token's ``alg`` header only has to agree with the key; it never chooses the algorithm,
    so ``alg: none`` and HS/RS confusion fail.
    """

    def __init__(self, auth: AuthSettings, *, clock: Clock = SYSTEM_CLOCK) -> None:
        if auth.mode != "jwt":  # AuthSettings decides the key source (exactly one) for mode 'jwt'
            raise ConfigError(f"a JWT verifier needs auth.mode 'jwt', not {auth.mode!r}")
        self._keys: KeySource
        if auth.jwt_secret is not None:
            self._keys = StaticKeys({None: Key("HS256", hs256_secret_bytes(auth))})
        elif auth.jwt_public_key_file is not None:
            self._keys = StaticKeys({None: load_pem_public_key(auth.jwt_public_key_file)})
        elif auth.jwks_file is not None:
            self._keys = StaticKeys(load_jwks(auth.jwks_file))
        else:
            assert auth.jwks_url is not None
            self._keys = RemoteJwks(
                auth.jwks_url,
                cache_s=auth.jwks_cache_s,
                refresh_interval_s=auth.jwks_refresh_interval_s,
                clock=clock,
            )
        self._tenant_claim = auth.tenant_claim
        self._issuer = auth.issuer
        self._audience = auth.audience
        self._leeway = auth.leeway_s
        self._max_lifetime = auth.max_token_lifetime_s
        self._clock = clock
        self._require = ["exp", auth.tenant_claim]
        if auth.issuer is not None:
            self._require.append("iss")
        if auth.audience is not None:
            self._require.append("aud")

    @property
    def algorithms(self) -> frozenset[str]:
        """The algorithms this verifier accepts (one per known key)."""
        return self._keys.algorithms

    @property
    def keys(self) -> KeySource:
        """Where the keys come from (a ``RemoteJwks`` counts its fetches)."""
        return self._keys

    @staticmethod
    def _header(token: str) -> dict[str, Any]:
        if not token or len(token) > MAX_TOKEN_CHARS:
            raise Rejected(Reason.MALFORMED, "malformed token (empty or too long)")
        try:
            return jwt.get_unverified_header(token)
        except jwt.PyJWTError as e:
            raise reason_of(e) from None

    def check(self, token: str) -> AccessToken:
        """Verify ``token`` or raise ``Rejected`` with a safe reason (stdio; may fetch keys, blocking)."""
        header = self._header(token)
        return self._decode(token, header, self._keys.cached(header) or self._keys.fetch_for(header))

    async def acheck(self, token: str) -> AccessToken:
        """``check`` for the event loop: a key fetch runs on a worker thread."""
        header = self._header(token)
        key = self._keys.cached(header)
        if key is None:
            key = await anyio.to_thread.run_sync(self._keys.fetch_for, header)
        return self._decode(token, header, key)

    def _decode(self, token: str, header: Mapping[str, Any], key: Key) -> AccessToken:
        if header.get("alg") != key.alg:
            # PyJWT would refuse too; checking first gives a clear reason and never touches the key.
            raise Rejected(Reason.ALGORITHM, f"algorithm not allowed (this key verifies only {key.alg})")
        try:
            payload = jwt.decode(
                token,
                key.key,
                algorithms=[key.alg],
                options={"require": list(self._require), "enforce_minimum_key_length": True},
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway,
            )
        except jwt.PyJWTError as e:
            raise reason_of(e) from None
        exp = self._check_times(payload)
        tenant = valid_tenant(payload.get(self._tenant_claim))
        if tenant is None:
            raise Rejected(
                Reason.CLAIMS,
                f"claim {self._tenant_claim!r} must be a non-empty string without control characters",
            )
        sub = payload.get("sub")  # PyJWT has checked it is a string when present
        # Without `sub` the caller is this token alone: a digest prefix names it without revealing it.
        subject = sub if sub else "token:" + hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]
        return AccessToken(
            token=token,
            client_id=session_owner("jwt", tenant, subject),
            scopes=_scopes(payload),
            # The SDK re-checks expires_at against its clock without leeway; give it our effective expiry.
            expires_at=exp + self._leeway,
            resource=self._audience,
            subject=subject,
            claims={"tenant": tenant, "iss": payload.get("iss")},
        )

    def _check_times(self, payload: Mapping[str, Any]) -> int:
        """``exp``/``nbf``/``iat`` are JSON numbers (PyJWT accepts "123"), and the token expires
        within ``auth.max_token_lifetime_s`` from now: a stolen long-lived token is refused."""
        for claim in ("exp", "nbf", "iat"):
            value = payload.get(claim)
            if value is None and claim != "exp":
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise Rejected(Reason.CLAIMS, f"claim {claim!r} must be a number (seconds since the epoch)")
        exp = int(payload["exp"])
        left = exp - self._clock.now().timestamp()
        if left > self._max_lifetime:
            raise Rejected(
                Reason.LIFETIME,
                f"token lifetime too long: it expires in {int(left)} s, more than "
                f"auth.max_token_lifetime_s ({self._max_lifetime} s); ask the issuer for a shorter-lived one",
            )
        return exp

    def verify(self, token: str) -> AccessToken | None:
        """Synchronous form of ``verify_token``."""
        try:
            return self.check(token)
        except Exception as e:
            refused(e)
            return None

    async def verify_token(self, token: str) -> AccessToken | None:
        """TokenVerifier protocol: None makes the SDK answer 401; the reason goes to the challenge."""
        try:
            return await self.acheck(token)
        except Exception as e:
            refused(e)
            return None
