"""Running the HTTP service: the token, the listening socket, the server's lifetime."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import logging.handlers
import os
import queue
import secrets
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from types import FrameType

from sidecar.app.home import TOKEN_FILE
from sidecar.core import Sidecar
from sidecar.errors import AddressInUse, Busy, ConfigError, InvalidInput
from sidecar.limits import MAX_BODY_BYTES
from sidecar.settings import Settings
from sidecar.shells.api.app import create_app
from sidecar.shells.api.schema_wait import wait_for_schema
from sidecar.trust.principals import Principals, check_token

log = logging.getLogger("sidecar.service")
MAINTAIN_EVERY_S = 10.0
"""How often a degraded server retries the moves it could not finish (and a replica on
a shared state looks for moves another one left unfinished)."""
ARCHIVE_MAINTAIN_EVERY_S = 3600.0
"""How often a Delta archive is compacted, checkpointed and vacuumed."""


def server_token(settings: Settings, host: str) -> str | None:
    """The operator's single token the server takes (``None``: the named tokens of
    ``SIDECAR_TOKENS_FILE`` alone), settled before anything is bound or opened.

    On a shared state (``SIDECAR_DATABASE_URL``) every replica must take the same
    tokens, so that a client behind a load balancer is let in by whichever replica it
    reaches: they are configured (``SIDECAR_TOKEN``, ``SIDECAR_TOKENS_FILE``), never made
    in the home (:func:`_shared_token`).  Otherwise ``$SIDECAR_TOKEN``, else the home's
    ``token`` file, made on a loopback server's first start; a server on another address
    needs a token configured, or named tokens."""
    if settings.shared:
        return _shared_token(settings)
    if is_loopback(host):
        return token_for(settings.home)
    token = token_for(settings.home, create=False)
    if token is None and not len(Principals.load(settings.tokens_path, None)):
        raise InvalidInput(
            f"refusing to bind {host} (not loopback) without a token: set SIDECAR_TOKEN, "
            f"create {settings.home / TOKEN_FILE}, or name tokens with SIDECAR_TOKENS_FILE"
        )
    return token


def _shared_token(settings: Settings) -> str | None:
    """The token set of a replica of a shared state: ``$SIDECAR_TOKEN`` and the named
    tokens of ``SIDECAR_TOKENS_FILE``, at least one of them.  A home's own token set
    would let a client in on that replica alone: its ``tokens.json`` (unless named by
    the setting) is refused, its ``token`` file is neither read nor made."""
    if settings.tokens_file is None and settings.tokens_path.exists():
        raise ConfigError(
            f"{settings.tokens_path} holds this replica's own tokens, but replicas of a "
            "shared state take one token set: name the same file on every replica with "
            "SIDECAR_TOKENS_FILE"
        )
    env = os.environ.get("SIDECAR_TOKEN")
    if env:
        return check_token(env, "SIDECAR_TOKEN")
    if settings.tokens_file is not None and len(Principals.load(settings.tokens_file, None)):
        return None
    own = settings.home / TOKEN_FILE
    raise ConfigError(
        "replicas of a shared state take one token set, so that a client is let in by "
        "whichever replica it reaches: set SIDECAR_TOKEN, or SIDECAR_TOKENS_FILE to named "
        "tokens, the same on every replica (no token is made in a replica's home"
        + (f"; {own} is this replica's own and is not read)" if own.exists() else ")")
    )


def token_for(home: Path, create: bool = True) -> str | None:
    """``$SIDECAR_TOKEN``, else the home's 0600 ``token`` file (made on first start),
    stripped; one that is blank or too short once stripped is refused here, before
    anything is bound or loaded (:func:`~sidecar.trust.principals.check_token`)."""
    env = os.environ.get("SIDECAR_TOKEN")
    if env:
        return check_token(env, "SIDECAR_TOKEN")
    path = home / TOKEN_FILE
    if path.exists():
        return check_token(path.read_text(), f"the token file {path}")
    if not create:
        return None
    home.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only: ``localhost``, or a loopback address
    (an IPv6 one also as URLs write it, ``[::1]``).  The gateway asks the same."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound now: a taken port fails at once, and port 0 gets a
    free port from the OS (read it back with ``getsockname``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressInUse(f"cannot serve on {host}:{port}: the address is in use") from None
        raise AddressInUse(f"cannot serve on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    return sock


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """A stop signal arrived: the server shut down, or is to stop starting.  Like
    ``KeyboardInterrupt``, not an ``Exception``: no ``except Exception`` on the way out
    (a store's error mapping, a retry loop) may take it for a failure."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signum)


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT and SIGTERM end the serving the same way.  While uvicorn runs it handles
    both (a graceful shutdown: requests finish, the app's shutdown hooks run), then
    raises the signal again once it is done; with the default handlers a SIGTERM would
    then kill the process before ``server.json`` is withdrawn and the home is closed.
    Here both become :class:`Stopped`, which unwinds every ``finally`` on its way out.
    Off the main thread (a test's server) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


Announce = Callable[[str, str | None], None]
"""Told the URL once the server answers, and the home's token file (``None``: the
tokens are configured, none was made in the home)."""


def serve(
    sc: Sidecar,
    host: str = "127.0.0.1",
    port: int = 8765,
    max_body_bytes: int = MAX_BODY_BYTES,
    announce: Announce | None = None,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM (either: a clean shutdown, ``server.json``
    withdrawn).  ``sc`` must own its home (opened for writing): the server is then the
    one process that writes to it, and local CLI commands find it through the home's
    ``server.json``."""

    def run() -> None:
        with _listening(sc.settings, host, port) as (token, sock):
            _serve(sc, sock, host, token, max_body_bytes, announce, progress)

    _until_stopped(run, progress)


def serve_home(
    settings: Settings,
    host: str = "127.0.0.1",
    port: int = 8765,
    max_body_bytes: int = MAX_BODY_BYTES,
    announce: Announce | None = None,
    progress: Callable[[str], None] | None = None,
    prepare: Callable[[Sidecar], None] | None = None,
) -> None:
    """Open the home ``settings`` name and :func:`serve` it (``sidecar serve``), with
    ``prepare`` run on the library before the first request.  The tokens are settled
    and the socket bound first; under ``SIDECAR_MIGRATE=never`` the socket answers not
    ready until the state is at this code's schema (:mod:`~sidecar.shells.api.
    schema_wait`), and only then is the home opened."""

    def run() -> None:
        with _listening(settings, host, port) as (token, sock):
            if settings.migrate == "never":
                principals = Principals.load(settings.tokens_path, token)
                wait_for_schema(sock, settings, principals, progress)
            if progress is not None:
                progress(f"opening the sidecar home {settings.home}")
            with Sidecar(settings) as sc:
                if prepare is not None:
                    prepare(sc)
                _serve(sc, sock, host, token, max_body_bytes, announce, progress)

    _until_stopped(run, progress)


@contextlib.contextmanager
def _listening(
    settings: Settings, host: str, port: int
) -> Iterator[tuple[str | None, socket.socket]]:
    """The server's token, settled first (a bad one binds nothing), and its socket."""
    token = server_token(settings, host)
    with closing(bind(host, port)) as sock:
        yield token, sock


def _until_stopped(run: Callable[[], None], progress: Callable[[str], None] | None) -> None:
    try:
        with stop_signals():
            run()
    except Stopped as stopped:
        if progress is not None:
            progress(f"sidecar stopped ({stopped})")


def _serve(
    sc: Sidecar,
    sock: socket.socket,
    host: str,
    token: str | None,
    max_body_bytes: int,
    announce: Announce | None,
    progress: Callable[[str], None] | None,
) -> None:
    import uvicorn

    home = sc.settings.home
    bound = sock.getsockname()[1]
    url = f"http://{host}:{bound}" if ":" not in host else f"http://[{host}]:{bound}"
    listener = _configure_logging()
    try:
        if progress is not None:
            progress("opening the hot index and loading the embedding model")
        # ready means ready to answer lookups: the index and the query graph; the
        # document graph (adding tools) loads on first use, off the start's path
        sc.warm_up(documents=False)
        app = create_app(sc, token, max_body_bytes)
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=5
        )
        server = uvicorn.Server(config)
        stop = threading.Event()
        keeper = threading.Thread(target=_maintain, args=(sc, stop), daemon=True)
        keeper.start()
        sc.announce_server(url)
        if announce is not None:
            announce(url, None if sc.settings.shared else str(home / TOKEN_FILE))
        try:
            server.run(sockets=[sock])
        finally:
            stop.set()
            sc.withdraw_server()
    finally:
        listener.stop()


def _maintain(sc: Sidecar, stop: threading.Event) -> None:
    """Retry interrupted moves while the server is degraded, so that it recovers by
    itself once the store is writable again.  On a shared state every replica also
    looks for moves another replica left unfinished (it died mid-move): the first to
    take the eviction lock, which the dead holder's session no longer holds, finishes
    them, so a move is resumed within ``MAINTAIN_EVERY_S`` of its holder's death.  A
    Delta archive is compacted, checkpointed and vacuumed every
    ``ARCHIVE_MAINTAIN_EVERY_S`` by whichever replica takes its lock first."""
    archive_due = time.monotonic() + ARCHIVE_MAINTAIN_EVERY_S
    while not stop.wait(MAINTAIN_EVERY_S):
        if sc.degraded or sc.settings.shared:
            try:
                sc.maintain()
            except Exception as exc:  # a failing retry must not stop the next one
                log.warning("recovery retry failed: %s", type(exc).__name__)
        if time.monotonic() >= archive_due and sc.settings.cold_url is not None:
            archive_due = time.monotonic() + ARCHIVE_MAINTAIN_EVERY_S
            try:
                sc.maintain_archive()
            except Busy:
                pass  # another replica is maintaining it
            except Exception as exc:
                log.warning("archive maintenance failed: %s", type(exc).__name__)


class _DroppingQueueHandler(logging.handlers.QueueHandler):
    """Hands records to the writer thread without ever waiting: when the log sink is
    slower than the requests (a pipe nobody reads fills in 64 KiB), lines are dropped
    and counted instead of stalling the event loop that serves every request."""

    def __init__(self, q: queue.Queue[logging.LogRecord]) -> None:
        super().__init__(q)
        self.dropped = 0

    def enqueue(self, record: logging.LogRecord) -> None:
        try:
            self.queue.put_nowait(record)
        except queue.Full:
            self.dropped += 1


LOG_QUEUE = 10_000
"""Log records waiting for the writer thread, at most."""


def _configure_logging() -> logging.handlers.QueueListener:
    """JSON lines on stderr, written by a thread of their own; the request log never
    holds a token (paths are redacted, headers are not logged)."""
    sink = logging.StreamHandler(sys.stderr)
    sink.setFormatter(logging.Formatter("%(message)s"))
    records: queue.Queue[logging.LogRecord] = queue.Queue(LOG_QUEUE)
    handler = _DroppingQueueHandler(records)
    for name in ("sidecar.service", "sidecar"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(logging.INFO)
        logger.propagate = False
    for noisy in ("mcp", "uvicorn.error"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    listener = logging.handlers.QueueListener(records, sink)
    listener.start()
    return listener
