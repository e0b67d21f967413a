"""`[auth]`: how callers are known (a fixed tenant, JWTs, API keys), decided once here; the
verifiers (server/auth/) trust it. Exported by config.py."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from mongogate.config_sections import Section, https_or_loopback


class ApiKeyEntry(Section):
    sha256: str
    tenant: str = Field(min_length=1)
    subject: str | None = None
    scopes: list[str] = Field(default_factory=list)

    @field_validator("sha256")
    @classmethod
    def _hex(cls, v: str) -> str:
        v = v.lower()
        if len(v) != 64 or any(c not in "0123456789abcdef" for c in v):
            raise ValueError("must be the 64-character hex SHA-256 digest of the key, not the key itself")
        return v


class AuthSettings(Section):
    mode: Literal["none", "jwt", "api_keys"] = "none"
    tenant: str | None = None
    """stdio / mode "none": the fixed tenant of this server."""
    subject: str = "local"
    tenant_claim: str = "tenant_id"
    issuer: str | None = None
    audience: str | None = None
    leeway_s: int = Field(default=30, ge=0, le=600)
    max_token_lifetime_s: int = Field(default=24 * 3600, ge=60)
    """A JWT expiring later than this from now is refused (a leaked long-lived token stays useless)."""
    jwt_secret: SecretStr | None = None
    jwt_public_key_file: Path | None = None
    jwks_file: Path | None = None
    jwks_url: str | None = None
    """An identity provider's JWKS endpoint (https; http only on loopback): keys fetched and cached."""
    jwks_cache_s: int = Field(default=600, ge=1, le=86_400)
    """Fetched keys are used this long before the set is fetched again (a removed key stops working)."""
    jwks_refresh_interval_s: int = Field(default=60, ge=1, le=86_400)
    """At most one JWKS fetch per this interval, however many unknown `kid`s arrive."""
    advertise_issuer: bool = False
    """auth.issuer is an OAuth authorization server: name it in the protected-resource metadata."""
    api_keys: list[ApiKeyEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _mode_needs(self) -> AuthSettings:
        if self.mode == "jwt":
            sources = (self.jwt_secret, self.jwt_public_key_file, self.jwks_file, self.jwks_url)
            if len([k for k in sources if k is not None]) != 1:
                raise ValueError(
                    "mode 'jwt' needs exactly one of jwt_secret, jwt_public_key_file, jwks_file, jwks_url"
                )
        if self.jwks_url is not None and not https_or_loopback(self.jwks_url):
            raise ValueError(
                "jwks_url must be an https:// URL (http:// only for 127.0.0.1, ::1 or localhost)"
            )
        if self.advertise_issuer and (
            self.mode != "jwt" or self.issuer is None or not https_or_loopback(self.issuer)
        ):
            raise ValueError(
                "advertise_issuer needs mode 'jwt' and an issuer that is the authorization server's https:// "
                "URL (its OAuth metadata is at <issuer>/.well-known/oauth-authorization-server)"
            )
        if self.mode == "api_keys" and not self.api_keys:
            raise ValueError("mode 'api_keys' needs at least one [[auth.api_keys]] entry")
        return self
