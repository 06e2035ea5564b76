"""Serving a gateway over streamable HTTP on a bound socket, in this order: the upstreams
connected and synced, then the socket served, then (and only then) the announcement.

An upstream that cannot be reached at start raises
:class:`~sidecar.errors.UpstreamUnavailable` before anything is served or printed, so the
shell shows one line and exits with the gateway's own code.  SIGINT and SIGTERM both
stop the server gracefully: open sessions are concluded and reported before the process
ends.
"""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import anyio


class Servable(Protocol):
    """What serving needs of a gateway (:class:`~sidecar.agents.gateway.server.Gateway`)."""

    token: str | None
    path: str

    @property
    def asgi_app(self) -> Any: ...

    def lifespan(self) -> AbstractAsyncContextManager[Any]: ...


def serve_http(gateway: Servable, host: str = "127.0.0.1", port: int = 8766) -> None:
    """Serve ``gateway`` on ``host:port`` until interrupted (SIGINT or SIGTERM).  A
    non-loopback ``host`` needs a token.  Raises what stops it from serving (an upstream
    unreachable at start: :class:`~sidecar.errors.UpstreamUnavailable`) before it
    serves."""
    from sidecar.errors import GatewayError
    from sidecar.shells.api.serve import bind, is_loopback

    if not is_loopback(host) and not gateway.token:
        raise GatewayError(f"refusing to bind {host} (not loopback) without a token")
    sock = bind(host, port)
    try:
        anyio.run(serve_on, gateway, sock, None)
    finally:
        sock.close()


def url_of(sock: socket.socket, path: str) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


async def serve_on(
    gateway: Servable, sock: socket.socket, announce: Callable[[str], None] | None = None
) -> None:
    """Serve ``gateway`` on the listening ``sock`` until SIGINT or SIGTERM.  A socket
    not bound to loopback needs the gateway to have a token."""
    import uvicorn

    from sidecar.errors import GatewayError
    from sidecar.shells.api.serve import is_loopback

    host = str(sock.getsockname()[0])
    if gateway.token is None and not is_loopback(host):
        raise GatewayError(f"refusing to serve on {host} (not loopback) without a token")

    config = uvicorn.Config(
        gateway.asgi_app,
        log_level="warning",
        access_log=False,
        lifespan="off",  # the gateway's lifespan is run here, around the server
        timeout_graceful_shutdown=5,
    )
    server = _Server(config)
    async with gateway.lifespan(), anyio.create_task_group() as tg:
        tg.start_soon(_stop_on_signals, server)
        tg.start_soon(server.serve, [sock])
        while not server.started:
            if server.should_exit:
                break
            await anyio.sleep(0.02)
        else:
            if announce is not None:
                announce(url_of(sock, gateway.path))
        while not server.should_exit:
            await anyio.sleep(0.1)
        with anyio.move_on_after(10):
            while server.started:  # uvicorn's own shutdown: connections drained
                await anyio.sleep(0.05)
        tg.cancel_scope.cancel()


class _Server:
    """uvicorn's server without its signal handling (the caller's handles both signals
    alike, where uvicorn would re-raise SIGTERM after a shutdown and end the process
    before the gateway reports its sessions)."""

    def __init__(self, config: Any) -> None:
        import uvicorn

        class Quiet(uvicorn.Server):
            def capture_signals(self) -> Any:
                import contextlib

                return contextlib.nullcontext()

        self._server = Quiet(config)

    @property
    def started(self) -> bool:
        return bool(self._server.started)

    @property
    def should_exit(self) -> bool:
        return bool(self._server.should_exit)

    def stop(self) -> None:
        self._server.should_exit = True

    async def serve(self, sockets: list[socket.socket]) -> None:
        from sidecar.errors import GatewayUnavailable

        try:
            await self._server.serve(sockets)
        except SystemExit as exc:  # uvicorn exits 3 when it cannot start: never ours to use
            raise GatewayUnavailable(
                f"the HTTP server could not start (uvicorn: {exc.code})"
            ) from None
        finally:
            self._server.should_exit = True
            self._server.started = False


async def _stop_on_signals(server: _Server) -> None:
    try:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                server.stop()
                return
    except (NotImplementedError, ValueError):  # not the main thread, or no signals here
        await anyio.sleep_forever()
