"""Who is calling: bearer-token verification for HTTP and the fixed principal of a stdio server.

The tenant is read only from a verified credential (a JWT claim or a configured API key) or
from the launch configuration, never from a tool argument. Verification failures return
``None`` so the MCP SDK answers 401 with ``WWW-Authenticate``; the reason is logged, the
token never is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, assert_never

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
from mongogate.server.auth.reasons import Rejected, valid_tenant

if TYPE_CHECKING:
    from mongogate.server.auth.hs256 import MIN_HS256_SECRET_BYTES
    from mongogate.server.auth.jwt_verifier import JwtVerifier
    from mongogate.server.auth.signing_keys import MIN_RSA_BITS, hs256_secret_bytes

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


#: Environment variable holding the API key of a stdio server in ``api_keys`` mode.
API_KEY_ENV = "MONGOGATE_API_KEY"
#: Environment variable holding the JWT of a stdio server in ``jwt`` mode.
TOKEN_ENV = "MONGOGATE_TOKEN"


#: names of the JWT modules, loaded on first use (PyJWT and cryptography: `reasons.py`)
_JWT_NAMES = {
    "JwtVerifier": "mongogate.server.auth.jwt_verifier",
    "MIN_HS256_SECRET_BYTES": "mongogate.server.auth.hs256",
    "MIN_RSA_BITS": "mongogate.server.auth.signing_keys",
    "hs256_secret_bytes": "mongogate.server.auth.signing_keys",
}


def __getattr__(name: str) -> Any:
    """The JWT names of `__all__`, imported when first asked for."""
    module = _JWT_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def printable(text: str) -> str:
    """``text`` with every non-printable character escaped, so a log line stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def build_token_verifier(auth: AuthSettings, *, clock: Clock = SYSTEM_CLOCK) -> TokenVerifier | None:
    """The verifier for ``auth.mode`` (None for "none"); key files are read and checked now, at startup
    (a JWKS URL is fetched at the first token)."""
    if auth.mode == "none":
        return None
    if auth.mode == "jwt":
        if auth.jwt_secret is not None:  # checked now, PyJWT imported at the first token
            from mongogate.server.auth.deferred import DeferredJwtVerifier

            return DeferredJwtVerifier(auth, clock=clock)
        from mongogate.server.auth.jwt_verifier import JwtVerifier

        return JwtVerifier(auth, clock=clock)
    if auth.mode == "api_keys":
        return ApiKeyVerifier(auth.api_keys)
    assert_never(auth.mode)  # AuthSettings.mode is a Literal of the three


# --------------------------------------------------------------------------- principals


def principal_from_access_token(token: AccessToken) -> Principal:
    """The principal of a verified token; a token without a tenant (not from our verifiers) is refused."""
    tenant = valid_tenant((token.claims or {}).get("tenant"))
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
        tenant = valid_tenant(auth.tenant)
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
        from mongogate.server.auth.jwt_verifier import JwtVerifier

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
