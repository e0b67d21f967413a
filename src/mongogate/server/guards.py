"""ASGI guards in front of the MCP app: Host/Origin checks (DNS rebinding) and a body deadline.

Both run before authentication and before the SDK reads anything, for every route
(the MCP endpoint and the OAuth metadata alike).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mongogate.config import ServerSettings
from mongogate.errors import ConfigError
from mongogate.server.memory_return import body_ended

log = logging.getLogger(__name__)

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = ("0.0.0.0", "::", "")
_BODYLESS = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _split_host(value: str) -> tuple[str, str | None]:
    """``name[:port]`` or ``[v6][:port]`` -> (lower-case name without brackets, port text or None)."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        return name, rest[1:] if rest.startswith(":") else None
    if value.count(":") == 1:
        name, port = value.split(":")
        return name, port
    return value, None  # a bare name, or an unbracketed IPv6 address


@dataclass(frozen=True)
class _Rule:
    name: str
    port: str | None  # None: the bound port; "*": any port; else that port

    def matches(self, name: str, port: str, bound_port: str) -> bool:
        want = bound_port if self.port is None else self.port
        return name == self.name and (want == "*" or want == port)


def _host_rules(settings: ServerSettings, bind: str, public: SplitResult | None) -> list[_Rule]:
    """The allowed hosts: the bound address (and the localhost forms when bound to loopback or
    to every address), the host of `public_url`, and `allowed_hosts`."""
    rules: list[_Rule] = []
    if is_loopback(bind) or bind in WILDCARD_BINDS:
        rules += [_Rule(n, None) for n in sorted({bind, *LOCAL_NAMES} - {""})]
    else:
        rules.append(_Rule(bind, None))
    if public is not None and public.hostname:
        rules.append(_Rule(public.hostname.lower(), str(public.port) if public.port else "*"))
    for entry in settings.allowed_hosts:
        if entry != "*":
            name, port = _split_host(entry)
            rules.append(_Rule(name, port or "*"))
    return rules


class HostOriginGuard:
    """421 for a Host this server does not answer to, 403 for a foreign browser Origin.

    Allowed hosts: the bound address and port, the localhost forms when bound to loopback,
    the host of ``server.public_url``, and ``server.allowed_hosts``. Allowed origins: the
    same hosts over http, the origin of ``public_url``, and ``server.allowed_origins``.
    Requests without an Origin (non-browser clients) pass the Origin check.
    """

    def __init__(self, app: ASGIApp, settings: ServerSettings) -> None:
        self.app = app
        self.any_host = "*" in settings.allowed_hosts
        bind = settings.host.strip("[]").lower()
        public = urlsplit(settings.public_url) if settings.public_url else None
        if bind in WILDCARD_BINDS and not (self.any_host or settings.allowed_hosts or public):
            raise ConfigError(
                f"server.host {settings.host!r} accepts connections for any name, so Host checking needs "
                'the names clients use: set server.allowed_hosts (e.g. ["mcp.example.com"]) or '
                'server.public_url; behind a proxy that checks Host itself, server.allowed_hosts = ["*"]'
            )
        self.rules = tuple(_host_rules(settings, bind, public))
        self.origins = {o.rstrip("/").lower() for o in settings.allowed_origins}
        if public is not None and public.hostname:
            self.origins.add(f"{public.scheme}://{public.netloc}".lower())

    def host_allowed(self, host: str | None, bound_port: str, scheme: str) -> bool:
        if self.any_host:
            return True
        if not host:
            return False
        name, port = _split_host(host)
        port = port or ("443" if scheme in ("https", "wss") else "80")
        return any(r.matches(name, port, bound_port) for r in self.rules)

    def origin_allowed(self, origin: str, bound_port: str) -> bool:
        origin = origin.rstrip("/").lower()
        if origin in self.origins or any(
            o.endswith(":*") and origin.startswith(o[:-1]) and origin[len(o) - 1 :].isdigit()
            for o in self.origins
        ):
            return True
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
            return False  # "null", file:, paths: never an origin we serve
        try:
            port = str(parts.port or (443 if parts.scheme == "https" else 80))
        except ValueError:
            return False
        return any(r.matches(parts.hostname, port, bound_port) for r in self._own())

    def _own(self) -> Iterable[_Rule]:
        """Origins implied by the hosts we answer to: the bound host (and localhost forms)."""
        return (r for r in self.rules if r.port is None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k: v for k, v in scope["headers"] if k in (b"host", b"origin")}
        server = scope.get("server")
        bound_port = str(server[1]) if server and server[1] is not None else "*"
        host = headers.get(b"host", b"").decode("latin-1")
        if not self.host_allowed(host, bound_port, scope.get("scheme", "http")):
            log.warning("refused a request for Host %r (server.allowed_hosts)", host[:100])
            await _plain(send, 421, b"Misdirected request: this server does not answer to that Host")
            return
        raw_origin = headers.get(b"origin")
        origin = None if raw_origin is None else raw_origin.decode("latin-1")
        if origin is not None and not self.origin_allowed(origin, bound_port):
            log.warning("refused a request from Origin %r (server.allowed_origins)", origin[:100])
            await _plain(send, 403, b"Forbidden: this Origin may not call this server")
            return
        await self.app(scope, receive, send)


def json_tokens(body: bytes) -> int:
    """Objects, arrays and keys in a JSON body, counted in C (brackets and colons inside strings
    count too: an overestimate). Parsing costs about 0.5 µs per key and 0.15 µs per container."""
    return body.count(b"{") + body.count(b"[") + body.count(b":")


class BodyDeadline:
    """Watch the request body as the app reads it: whole within ``timeout_s`` of the head (else 408)
    and no denser than ``max_json_tokens`` (else 413), both decided before anyone parses it.

    Nothing is buffered here and nothing is read before the app asks, so authentication still
    refuses a caller before its body is read. On a refusal the app gets a final chunk that is not
    JSON and over the body cap (it answers without running or parsing anything) and the client
    gets our answer, with ``connection: close``. No body makes the JSON parser hold the event
    loop for more than about 50 ms; a slow sender holds its connection for ``timeout_s`` at most.
    """

    def __init__(
        self,
        app: ASGIApp,
        timeout_s: float,
        max_json_tokens: int,
        max_bytes: int,
        *,
        return_freed_memory: bool = True,
    ) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self.max_json_tokens = max_json_tokens
        self.max_bytes = max_bytes
        #: test hook (server/memory_return.py): False keeps freed bodies' memory, the old behaviour
        self.return_freed_memory = return_freed_memory

    def _cut(self) -> Message:
        """The last chunk the app gets after a refusal: not JSON, and over the body cap, so the SDK's
        own size check answers at once instead of parsing what came before (we replace its answer)."""
        return {"type": "http.request", "body": b"\x00" * (self.max_bytes + 1), "more_body": False}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in _BODYLESS:
            await self.app(scope, receive, send)
            return
        deadline = anyio.current_time() + self.timeout_s
        tokens = 0
        received = 0
        done = False
        refusal: tuple[int, bytes] | None = None
        answered = False

        async def guarded_receive() -> Message:
            nonlocal tokens, done, refusal, received
            if done or refusal is not None:
                return await receive() if refusal is None else self._cut()
            with anyio.move_on_after(deadline - anyio.current_time()) as waited:
                message = await receive()
            if waited.cancelled_caught:
                log.warning("request body not received within server.body_timeout_s (%s s)", self.timeout_s)
                refusal = (408, b"Request body not received in time (server.body_timeout_s)")
                return self._cut()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                received += len(chunk)
                tokens += json_tokens(chunk)
                if tokens > self.max_json_tokens:
                    log.warning("refused a request body with over %d JSON objects, arrays and keys", tokens)
                    text = (
                        f"Request body too dense: over {self.max_json_tokens} JSON objects, arrays and keys"
                    )
                    refusal = (413, (text + " (server.max_json_tokens)").encode())
                    return self._cut()
                done = not message.get("more_body", False)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal answered
            if refusal is None:
                await send(message)
            elif message["type"] == "http.response.start" and not answered:
                answered = True  # our answer replaces the app's (a parse error)
                await _plain(send, *refusal)

        try:
            await self.app(scope, guarded_receive, guarded_send)
            if refusal is not None and not answered:
                await _plain(send, *refusal)
        finally:
            if self.return_freed_memory:  # a large body's memory goes back to the system (memory_return.py)
                body_ended(received)


async def _plain(send: Send, status: int, text: bytes) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(text)).encode())]
    if status in (408, 413):
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": text})
