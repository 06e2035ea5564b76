"""Who is signed in to the console: a session per sign-in, kept in this process.

The cookie holds a random session id, never the token: the server keeps, under the id's
digest, who signed in, the session's CSRF token and when it expires.  Sessions live as
long as the server (a restart signs everyone out) and :data:`LIFETIME_S` at most.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sidecar.trust.principals import Principal

COOKIE = "sidecar_console"
SIGN_IN_COOKIE = "sidecar_console_sign_in"
"""The sign-in form's own CSRF token (double submit): a page of another site cannot
sign a browser in under an attacker's token."""
PATH = "/console"
LIFETIME_S = 8 * 3600
MAX_SESSIONS = 1_000
"""Sessions kept at once; past it the oldest is dropped (its operator signs in again)."""


@dataclass
class ConsoleSession:
    principal: Principal
    csrf: str
    expires_at: float
    previews: dict[str, Any] = field(default_factory=dict)
    """The last forget preview per source, shown again beside what the forgetting did."""


def _key(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class ConsoleSessions:
    """The signed-in sessions of one server."""

    def __init__(self, lifetime_s: float = LIFETIME_S) -> None:
        self.lifetime_s = lifetime_s
        self._sessions: dict[str, ConsoleSession] = {}
        self._lock = threading.Lock()

    def open(self, principal: Principal) -> tuple[str, ConsoleSession]:
        """A new session for ``principal``: its id (the cookie's value) and itself."""
        session_id = secrets.token_urlsafe(32)
        session = ConsoleSession(
            principal, secrets.token_urlsafe(32), time.time() + self.lifetime_s
        )
        with self._lock:
            self._sweep()
            while len(self._sessions) >= MAX_SESSIONS:
                oldest = min(self._sessions, key=lambda k: self._sessions[k].expires_at)
                del self._sessions[oldest]
            self._sessions[_key(session_id)] = session
        return session_id, session

    def find(self, session_id: str | None) -> ConsoleSession | None:
        """The live session of a cookie's id (``None``: none, or expired)."""
        if not session_id:
            return None
        with self._lock:
            session = self._sessions.get(_key(session_id))
            if session is not None and session.expires_at <= time.time():
                del self._sessions[_key(session_id)]
                return None
            return session

    def close(self, session_id: str | None) -> None:
        if session_id:
            with self._lock:
                self._sessions.pop(_key(session_id), None)

    def _sweep(self) -> None:
        now = time.time()
        for key in [k for k, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[key]


def same_token(expected: str, presented: str | None) -> bool:
    """A CSRF token compared in constant time (a missing one matches nothing)."""
    return bool(presented) and hmac.compare_digest(expected.encode(), str(presented).encode())
