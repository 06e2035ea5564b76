"""The operator's console at ``/console``: server-rendered pages over the same
:class:`~sidecar.core.Sidecar` the HTTP API serves, in the same process and port.

An operator signs in with a token (the home's single token or a named operator token);
the console keeps a session cookie (HttpOnly, SameSite=Strict, Secure over https,
expiring) that holds a random id, never the token.  An agent's token is refused.  Every
form that changes state carries the session's CSRF token.  The HTTP layer's gate lets
``/console`` through without a bearer token: the console checks its own session.
"""

from __future__ import annotations

from fastapi import FastAPI

from sidecar.shells.console.actions import router as actions
from sidecar.shells.console.pages import router as pages
from sidecar.shells.console.sessions import PATH, ConsoleSessions
from sidecar.shells.console.web import Console
from sidecar.trust.principals import Principals


def mount_console(api: FastAPI, principals: Principals) -> None:
    """Serve the console from ``api``, signing in with the tokens of ``principals``."""
    api.state.console = Console(principals, ConsoleSessions())
    api.include_router(pages)
    api.include_router(actions)


__all__ = ["PATH", "mount_console"]
