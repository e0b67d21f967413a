"""Who is calling: bearer-token verification for HTTP and the fixed principal of a stdio server.

The tenant is read only from a verified credential (a JWT claim or a configured API key) or
from the launch configuration, never from a tool argument. Verification failures return
``None`` so the MCP SDK answers 401 with ``WWW-Authenticate``; the reason is logged, the
token never is.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, assert_never

import anyio
import jwt
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier

from mongogate.clock import SYSTEM_CLOCK, Clock
from mongogate.config import AuthSettings
from mongogate.errors import AuthError, ConfigError
from mongogate.principal import Principal
from mongogate.server.auth.apikeys import (
    MAX_TOKEN_CHARS,
    ApiKeyVerifier,
    api_key_access_token,
    hash_api_key,
    session_owner,
)
from mongogate.server.auth.challenge import note_rejection
from mongogate.server.auth.jwks import KeySource, Reason, Rejected, RemoteJwks, StaticKeys, reason_of
from mongogate.server.auth.signing_keys import (
    MIN_HS256_SECRET_BYTES,
    MIN_RSA_BITS,
    Key,
    hs256_secret_bytes,
    load_jwks,
    load_pem_public_key,
)

__all__ = [
    "API_KEY_ENV",
    "MAX_TOKEN_CHARS",
    "MIN_HS256_SECRET_BYTES",
    "MIN_RSA_BITS",
    "TOKEN_ENV",
    "ApiKeyVerifier",
    "JwtVerifier",
    "build_token_verifier",
    "current_principal",
    "hash_api_key",
    "hs256_secret_bytes",
    "principal_for_stdio",
    "principal_from_access_token",
    "printable",
    "require_scopes",
    "session_owner",
]

logger = logging.getLogger(__name__)

#: Environment variable holding the API key of a stdio server in ``api_keys`` mode.
API_KEY_ENV = "MONGOGATE_API_KEY"
#: Environment variable holding the JWT of a stdio server in ``jwt`` mode.
TOKEN_ENV = "MONGOGATE_TOKEN"


def _valid_tenant(value: object) -> str | None:
    """A tenant is a non-empty string without surrounding whitespace (" acme" must not pass as "acme")
    and without control characters (it is a data key and appears in every log line)."""
    if isinstance(value, str) and value and value.strip() == value and value.isprintable():
        return value
    return None


def printable(text: str) -> str:
    """``text`` with every non-printable character escaped, so a log line stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


# --------------------------------------------------------------------------- JWT


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
        tenant = _valid_tenant(payload.get(self._tenant_claim))
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
            _refused(e)
            return None

    async def verify_token(self, token: str) -> AccessToken | None:
        """TokenVerifier protocol: None makes the SDK answer 401; the reason goes to the challenge."""
        try:
            return await self.acheck(token)
        except Exception as e:
            _refused(e)
            return None


def _refused(e: Exception) -> None:
    """Log why a token was refused and tell the HTTP challenge the reason class."""
    if isinstance(e, Rejected):
        logger.info("bearer token rejected: %s", e)
        note_rejection(e.kind)
    else:  # a parser surprise must deny (401), never answer 500
        logger.warning("bearer token rejected: unexpected %s while verifying it", type(e).__name__)
        note_rejection(Reason.MALFORMED)


def build_token_verifier(auth: AuthSettings, *, clock: Clock = SYSTEM_CLOCK) -> TokenVerifier | None:
    """The verifier for ``auth.mode`` (None for "none"); key files are read and checked now, at startup
    (a JWKS URL is fetched at the first token)."""
    if auth.mode == "none":
        return None
    if auth.mode == "jwt":
        return JwtVerifier(auth, clock=clock)
    if auth.mode == "api_keys":
        return ApiKeyVerifier(auth.api_keys)
    assert_never(auth.mode)  # AuthSettings.mode is a Literal of the three


# --------------------------------------------------------------------------- principals


def principal_from_access_token(token: AccessToken) -> Principal:
    """The principal of a verified token; a token without a tenant (not from our verifiers) is refused."""
    tenant = _valid_tenant((token.claims or {}).get("tenant"))
    if tenant is None:
        raise AuthError("the access token carries no tenant; the request cannot be served")
    # The subject is only ever shown (logs, audit, error texts): escape it once, here.
    raw = token.subject or token.client_id
    subject = printable(raw)
    # the raw subject too when escaping changed it: the escaped form is not one-to-one, not an identity
    exact = None if subject == raw else raw
    return Principal(tenant=tenant, subject=subject, scopes=frozenset(token.scopes), subject_id=exact)


def principal_for_stdio(
    auth: AuthSettings, environ: Mapping[str, str], *, grant_scopes: Iterable[str] = ()
) -> Principal:
    """The fixed principal of a server whose caller is whoever launched it (stdio, or unauthenticated HTTP).

    ``grant_scopes`` are given to the local operator in mode "none" (pass the union of the tools'
    required scopes); in the other modes the scopes come from the key or token.
    """
    if auth.mode == "none":
        tenant = _valid_tenant(auth.tenant)
        if tenant is None:
            what = "is not set" if not auth.tenant else "must not be blank or padded with spaces"
            raise ConfigError(
                f"no tenant for this server: auth.mode is 'none' and auth.tenant {what}. Set it in the "
                'config file ([auth] tenant = "acme") or in the environment (MONGOGATE_AUTH__TENANT=acme); '
                "every tool call of this server then reads and writes that tenant's data only"
            )
        return Principal(tenant=tenant, subject=auth.subject, scopes=frozenset(grant_scopes))
    if auth.mode == "api_keys":
        key = environ.get(API_KEY_ENV, "")
        if not key:
            raise ConfigError(
                f"auth.mode is 'api_keys': set the environment variable {API_KEY_ENV} to one of the keys "
                "listed (by SHA-256 digest) in [[auth.api_keys]]; for stdio clients put it in the server's "
                '"env" entry'
            )
        entry = ApiKeyVerifier(auth.api_keys).lookup(key)
        if entry is None:
            raise ConfigError(
                f"{API_KEY_ENV} matches no [[auth.api_keys]] entry (its SHA-256 digest starts "
                f'{hash_api_key(key)[:8]}); add sha256 = "<digest>" for it, computed with '
                "python -c 'import hashlib,sys; print(hashlib.sha256(sys.argv[1].encode()).hexdigest())' KEY"
            )
        return principal_from_access_token(api_key_access_token(key, entry))
    if auth.mode == "jwt":
        token = environ.get(TOKEN_ENV, "").strip()
        if not token:
            raise ConfigError(
                f"auth.mode is 'jwt': a stdio server needs a token in the environment variable {TOKEN_ENV} "
                "(for development mint one with: mongogate token --tenant T), or use auth.mode 'none' with "
                "auth.tenant"
            )
        try:
            access = JwtVerifier(auth).check(token)
        except Rejected as e:
            raise ConfigError(f"{TOKEN_ENV} was rejected: {e}") from None
        return principal_from_access_token(access)
    assert_never(auth.mode)  # AuthSettings.mode is a Literal of the three


def current_principal(ctx_or_none: object | None, stdio_principal: Principal | None) -> Principal:
    """The caller of the current tool call: the verified bearer token if any, else the launch principal.

    Pass ``stdio_principal`` only when the transport has no authentication (stdio, or HTTP with
    --insecure-no-auth); with auth on, the SDK refuses token-less requests before they get here.
    ``ctx_or_none`` is accepted for the call site's convenience; the token comes from the SDK's
    request context variable.
    """
    del ctx_or_none
    token = get_access_token()
    if token is not None:
        return principal_from_access_token(token)
    if stdio_principal is not None:
        return stdio_principal
    raise AuthError("this request is not authenticated: send 'Authorization: Bearer <token>'")


def require_scopes(principal: Principal, scopes: Sequence[str], tool: str) -> None:
    """Refuse a tool call whose caller lacks any of the tool's required scopes, naming them."""
    missing = sorted(set(scopes) - principal.scopes)
    if missing:
        have = ", ".join(sorted(principal.scopes)) or "none"
        raise AuthError(
            f"tool {tool!r} requires scope(s) {', '.join(missing)} which the caller "
            f"({principal.subject}) lacks; its scopes: {have}. Ask for a token or API key that grants them"
        )
