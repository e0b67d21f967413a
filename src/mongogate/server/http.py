"""Streamable HTTP with uvicorn: in the foreground (CLI) or on a background thread (tests, embedding)."""

from __future__ import annotations

import asyncio
import ipaddress
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette

from mongogate.errors import ConfigError


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def http_app(server: MCPServer[Any], host: str) -> Starlette:
    # The SDK turns DNS-rebinding protection on for loopback hosts; we keep its default.
    return server.streamable_http_app(host=host)


def _config(server: MCPServer[Any], host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(http_app(server, host), host=host, port=port, log_level="warning", lifespan="on")


def serve_http(server: MCPServer[Any], host: str, port: int) -> None:
    uvicorn.Server(_config(server, host, port)).run()


class BackgroundHttpServer:
    """Serve on its own thread and loop; `url` is known once started (port 0 picks a free one)."""

    def __init__(self, server: MCPServer[Any], host: str = "127.0.0.1", port: int = 0) -> None:
        if not is_loopback(host):
            raise ConfigError("BackgroundHttpServer binds loopback addresses only")
        self._uv = uvicorn.Server(_config(server, host, port))
        self._thread = threading.Thread(target=self._run, name="mongogate-http", daemon=True)
        self.host = host
        self.port = port
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self._uv.serve())
        except BaseException as e:  # pragma: no cover - surfaced by start()
            self._error = e

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/mcp"

    def start(self, timeout: float = 30.0) -> BackgroundHttpServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._uv.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"HTTP server failed to start: {self._error!r}")
            if time.monotonic() > deadline:
                raise TimeoutError("HTTP server did not start")
            time.sleep(0.02)
        sock = self._uv.servers[0].sockets[0]
        self.port = int(sock.getsockname()[1])
        return self

    def stop(self) -> None:
        self._uv.should_exit = True
        self._thread.join(timeout=30)

    def __enter__(self) -> BackgroundHttpServer:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
