"""What a declaration of :mod:`sidecar.shells.operations` is made of: who may call
(:data:`Access`), a route (:class:`Http`), and an operation with the surfaces that offer
it (:class:`Operation`).  Imports nothing heavy (``sidecar --help`` reads it)."""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import Any, Literal

Access = Literal["public", "agent", "operator"]
"""Who may call: ``public`` anyone, with no token (probes, the API's documentation);
``agent`` any token (an operator's too); ``operator`` an operator's token alone.  What
runs in the caller's own process (a CLI command on its home, ``close``) runs as the
home's owner, who is an operator."""
ACCESS: tuple[Access, ...] = ("public", "agent", "operator")


@dataclass(frozen=True)
class Http:
    """A route: ``method`` and ``path`` as the router spells them (``{name}`` for a
    path parameter); ``prefix``: every path under ``path`` (a folder of static files)."""

    method: str
    path: str
    prefix: bool = False

    def __str__(self) -> str:
        return f"{self.method} {self.path}{'/…' if self.prefix else ''}"


@dataclass(frozen=True)
class Operation:
    """One operation and where it is offered.

    ``method``: the ``Sidecar`` method it calls (``None``: an operation of one shell
    alone, such as a probe or ``serve``); ``client``: ``RemoteSidecar`` has the same
    method, with the library's parameters and result; ``cli``: the command's words after
    ``sidecar``; ``mcp``: the tool's name; ``detail``: what a reader of the API's
    documentation or an agent reading the MCP tool's description needs beyond the
    summary."""

    name: str
    summary: str
    access: Access
    method: str | None = None
    http: Http | None = None
    client: bool = False
    cli: str | None = None
    mcp: str | None = None
    detail: str = ""

    def signature(self) -> inspect.Signature:
        """The library method's parameters and return annotation (its arguments and
        result), as ``Sidecar`` declares them."""
        return inspect.signature(self._library_method())

    def result(self) -> Any:
        """The library method's return type, resolved."""
        return typing.get_type_hints(self._library_method())["return"]

    def _library_method(self) -> Any:
        if self.method is None:
            raise LookupError(f"{self.name} calls no library method")
        from sidecar.core import Sidecar

        return getattr(Sidecar, self.method)


def library_op(
    name: str, access: Access, summary: str, *, http: str | None = None, **more: Any
) -> Operation:
    """An operation of the library (``method`` is ``name``, ``client`` true unless said):
    ``http`` as ``"METHOD /path"``."""
    more.setdefault("method", name)
    more.setdefault("client", True)
    return Operation(name, summary, access, http=http_of(http), **more)


def shell_op(
    name: str, access: Access, summary: str, *, http: str | None = None, **more: Any
) -> Operation:
    """An operation of one shell alone: no library method, no client method."""
    return Operation(name, summary, access, http=http_of(http), **more)


def http_of(route: str | None, prefix: bool = False) -> Http | None:
    if route is None:
        return None
    method, path = route.split(" ", 1)
    return Http(method, path, prefix)
