"""The transport to a stdio upstream: the SDK's process handling, with a reader that
takes a large message without holding the event loop.

The SDK's reader joins each chunk of the upstream's output to everything before it and
splits the lot again (for a 20 MB line, some 300 copies of up to 20 MB), then parses the
line in one go.  Here the chunks of a line are kept apart until its end is seen, and a
long line is parsed by :func:`sidecar.agents.gateway.proxy.bulk.parse_line` in slices.  A line over
``max_line`` bytes is dropped (the request it answered then ends at its timeout) and
reported as a parse error, so an upstream cannot make the gateway hold unbounded output.
Starting, stopping and killing the process (its whole tree) are the SDK's.

The upstream's stderr is read here too, line by line, and written to the gateway's own
stderr redacted (:class:`StderrLines`): an upstream that logs its connection string, a
command line or a private key does not put them in the gateway's log.  A line over
:data:`MAX_STDERR_LINE` bytes is replaced by a note.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TextIO, cast

import anyio
import anyio.lowlevel
import anyio.to_thread

from sidecar.agents.gateway.proxy.bulk import parse_line
from sidecar.agents.gateway.proxy.forwarding import NOT_OURS, RawCalls, route_value, session_message
from sidecar.trust.redact import line_redactor

if TYPE_CHECKING:
    from mcp import StdioServerParameters

log = logging.getLogger("sidecar.agents.gateway")


class LineTooLong(ValueError):
    """An upstream line longer than the transport takes."""


MAX_STDERR_LINE = 65_536


class StderrLines:
    """An upstream's stderr as the gateway writes it: each line redacted by a line
    redactor, which remembers what spans lines (every line of a private key block is
    masked, though one line alone does not look like a key)."""

    def __init__(self) -> None:
        self._redactor = line_redactor()

    def shown(self, line: bytes | LineTooLong) -> str:
        if isinstance(line, LineTooLong):
            return f"[an upstream stderr line over {MAX_STDERR_LINE} bytes was dropped]"
        return self._redactor.line(line.decode("utf-8", "replace").rstrip("\r"))


async def copy_stderr(stream: Any, errlog: TextIO) -> None:
    """Write ``stream`` (an upstream's stderr) to ``errlog``, redacted, until it ends;
    the write runs in a thread so that a stalled log never holds the event loop."""
    seen = StderrLines()

    def write(text: str) -> None:
        errlog.write(text + "\n")
        errlog.flush()

    with contextlib.suppress(
        anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError, OSError
    ):
        async for line in lines(stream, MAX_STDERR_LINE):
            await anyio.to_thread.run_sync(write, seen.shown(line))


async def lines(stream: Any, max_line: int) -> AsyncIterator[bytes | LineTooLong]:
    """The lines of a byte stream, without their newline; a line over ``max_line`` bytes
    comes as :class:`LineTooLong` once its end is seen."""
    pending: list[bytes] = []
    size = 0
    async for chunk in stream:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            piece = chunk[start:end]
            start = end + 1
            if size + len(piece) > max_line:
                yield LineTooLong(f"an upstream message over {max_line} bytes was dropped")
            elif pending:
                pending.append(piece)
                yield b"".join(pending)
            else:
                yield piece
            pending, size = [], 0
        rest = chunk[start:]
        if rest:
            size += len(rest)
            if size <= max_line:
                pending.append(rest)
            else:
                pending = []  # past the bound: counted, not kept


@contextlib.asynccontextmanager
async def stdio_transport(
    server: StdioServerParameters, errlog: TextIO, max_line: int, raw: RawCalls | None = None
) -> AsyncIterator[tuple[Any, Any]]:
    """Start ``server`` and yield its (read, write) message streams, as the SDK's
    ``stdio_client`` does; ``raw``: the link's raw calls
    (:mod:`sidecar.agents.gateway.proxy.forwarding`), written to the same stdin and answered
    from the same stdout."""
    from mcp.client import stdio as sdk

    command = await sdk._get_executable_command(server.command)
    process = await sdk._create_platform_compatible_process(
        command=command,
        args=server.args,
        env=sdk.get_default_environment() | (server.env or {}),
        errlog=cast(TextIO, subprocess.PIPE),  # read by copy_stderr, redacted
        cwd=server.cwd,
    )
    # no awaits before the task group: a cancellation here would leak the process
    pipes = _Pipes(server, process, max_line, raw)
    async with anyio.create_task_group() as tg:
        tg.start_soon(pipes.reader)
        tg.start_soon(pipes.writer)
        stderr = getattr(process, "stderr", None)  # Windows' fallback process has none
        if stderr is not None:
            tg.start_soon(copy_stderr, stderr, errlog)
        try:
            yield pipes.read_stream, pipes.write_stream
        finally:
            pipes.stopping = True
            with anyio.CancelScope(shield=True):  # every wait inside is bounded
                await pipes.shutdown()
            tg.cancel_scope.cancel()


class _Pipes:
    """A started upstream process and the message streams between it and the session:
    the reader turns its stdout into messages, the writer sends the session's messages
    to its stdin."""

    def __init__(
        self, server: StdioServerParameters, process: Any, max_line: int, raw: RawCalls | None
    ) -> None:
        from mcp.shared.message import SessionMessage

        self.server, self.process, self.max_line = server, process, max_line
        self.raw = raw
        self._stdin_lock = anyio.Lock()  # one whole line at a time, the session's or raw
        self.read_writer, self.read_stream = anyio.create_memory_object_stream[
            SessionMessage | Exception
        ](0)
        self.write_stream, self.write_reader = anyio.create_memory_object_stream[SessionMessage](0)
        self.stopping = False
        self.writer_done = anyio.Event()
        if raw is not None:
            raw.attach(self.send_raw, lambda body: self.send_raw("", body))

    async def send_raw(self, _rid: str, body: bytes) -> None:
        assert self.process.stdin is not None
        async with self._stdin_lock:
            await self.process.stdin.send(body + b"\n")

    async def _message(self, line: bytes) -> Any:
        """The session's message from ``line``; ``None`` when a raw call took it."""
        routed = await route_value(self.raw, line)
        if routed is NOT_OURS:
            return await parse_line(line)
        return None if routed is None else session_message(routed)

    async def reader(self) -> None:
        from mcp.client import stdio as sdk

        assert self.process.stdout is not None
        try:
            async with self.read_writer:
                try:
                    async for line in lines(self.process.stdout, self.max_line):
                        message = line if isinstance(line, Exception) else await self._message(line)
                        if message is None:
                            continue
                        try:
                            await self.read_writer.send(message)
                        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                            return
                finally:
                    if self.raw is not None:
                        self.raw.detach("the upstream closed its output")
                    await sdk._drain_stdout(self.process)
        except anyio.ClosedResourceError:
            pass  # our own shutdown closed the pipe under the read
        except (anyio.BrokenResourceError, ConnectionError):
            if not self.stopping:
                log.warning(
                    '{"event": "upstream_read_failed", "command": "%s"}', self.server.command
                )

    async def writer(self) -> None:
        assert self.process.stdin is not None
        try:
            async with self.write_reader:
                async for message in self.write_reader:
                    text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    async with self._stdin_lock:
                        await self.process.stdin.send((text + "\n").encode(self.server.encoding))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            await self.read_writer.aclose()  # the session sees the end, not a hang
        finally:
            self.writer_done.set()

    async def shutdown(self) -> None:
        from mcp.client import stdio as sdk

        if self.raw is not None:
            self.raw.detach("the upstream link was closed")
        self.read_stream.close()
        self.write_stream.close()
        with anyio.move_on_after(0.5):
            await self.writer_done.wait()
        await sdk._stop_server_process(self.process)
        await sdk._aclose_all(
            self.read_stream, self.write_stream, self.read_writer, self.write_reader
        )
        await anyio.lowlevel.checkpoint()
