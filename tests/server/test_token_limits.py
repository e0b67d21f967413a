"""JWT time claims are numbers, lifetimes are bounded, and only `--demo` prints a token."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import SecretStr

from mongogate.cli.serve import _banner
from mongogate.clock import ManualClock
from mongogate.config import AuthSettings, load_settings
from mongogate.server.auth.tokens import mint_dev_token
from mongogate.server.auth.verify import JwtVerifier, principal_from_access_token

from .test_auth_tokens import SECRET, auth_settings, claims, hs, now

DAY = 24 * 3600


def _verifier(at: int, **auth: Any) -> JwtVerifier:
    return JwtVerifier(
        auth_settings(jwt_secret=SECRET, **auth), clock=ManualClock(datetime.fromtimestamp(at, UTC))
    )


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
def test_time_claims_must_be_numbers(claim: str, caplog: pytest.LogCaptureFixture) -> None:
    t = now()
    good = {"exp": t + 300, "nbf": t - 10, "iat": t - 10}
    v = _verifier(t)
    assert v.verify(hs(claims(**good))) is not None
    with caplog.at_level(logging.INFO):
        assert v.verify(hs(claims(**{**good, claim: str(good[claim])}))) is None
    assert f"claim '{claim}' must be a number" in caplog.text


def test_lifetime_over_the_maximum_is_refused(caplog: pytest.LogCaptureFixture) -> None:
    t = now()
    v = _verifier(t)  # default auth.max_token_lifetime_s: 24 h
    assert v.verify(hs(claims(exp=t + DAY))) is not None
    with caplog.at_level(logging.INFO):
        assert v.verify(hs(claims(exp=t + DAY + 1))) is None
    assert "token lifetime too long" in caplog.text and "auth.max_token_lifetime_s" in caplog.text
    short = _verifier(t, max_token_lifetime_s=600)
    assert short.verify(hs(claims(exp=t + 601))) is None
    assert short.verify(hs(claims(exp=t + 600))) is not None


def test_mint_dev_token_respects_the_maximum() -> None:
    auth = AuthSettings(mode="jwt", jwt_secret=SecretStr(SECRET), max_token_lifetime_s=3600)
    mint_dev_token(auth, tenant="acme", ttl_s=3600)
    with pytest.raises(ValueError, match="max_token_lifetime_s"):
        mint_dev_token(auth, tenant="acme", ttl_s=3601)


def test_control_characters_never_reach_a_principal() -> None:
    v = _verifier(now())
    assert v.verify(hs(claims(tenant_id="acme\nroot"))) is None  # a tenant is a data key: refused
    token = v.verify(hs(claims(sub="alice\n2026-01-01 INFO forged line")))
    assert token is not None
    subject = principal_from_access_token(token).subject
    assert "\n" not in subject and subject == "alice\\n2026-01-01 INFO forged line"


@pytest.mark.parametrize("demo", [False, True])
def test_serve_prints_a_token_only_with_demo(demo: bool, capsys: pytest.CaptureFixture[str]) -> None:
    settings = load_settings(None, auth={"mode": "jwt", "jwt_secret": SECRET})
    _banner(settings, "http://127.0.0.1:8000/mcp", demo)
    err = capsys.readouterr().err
    assert ("export MONGOGATE_TOKEN=" in err) is demo
    assert ("eyJ" in err) is demo
