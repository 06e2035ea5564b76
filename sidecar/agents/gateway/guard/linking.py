"""Which agent session a gateway call belongs to, whether or not the client keeps one
MCP session per task.

The memory judges a call against what its session saw before it (the order fetched, its
status), and learns from whole sessions.  Many clients keep one MCP session per task;
others open a new one for every call (``langchain-mcp-adapters``' default
``MultiServerMCPClient(...).get_tools()``), and clients of the stateless 2026-07-28
protocol have no session at all.  A call is assigned to an agent session by the first of
these that applies:

1. **The MCP session.**  A connection that already made a call, or that made another
   request (``tools/list``...) before its first call, belongs to a client that keeps its
   session: every call on it is that session's.
2. **A declared id**: W3C baggage ``session.id`` or ``gen_ai.conversation.id`` (the
   ``baggage`` header, or ``_meta.baggage``), else the ``Sidecar-Session`` HTTP header
   or ``_meta["sidecar/session"]``.
3. **Trace context**: the trace id of the W3C ``traceparent`` (``_meta.traceparent``, as
   MCP clients propagate it, a ``trace_id`` in ``_meta``, or the HTTP header).  A trace
   says less than a declared id: the ``mcp`` client opens a span for every request and
   propagates it, so an agent with OpenTelemetry set up but no span of its own around a
   task sends a new trace with every call.  A trace two calls share is a task's (its
   session's context is known from then on); a trace seen for the first time, on a
   connection that does not keep its session, joins the session an earlier output of
   which showed one of the call's values (as in 4), else it starts a session of its
   own whose context is not known until a second call joins it (by the same trace or
   by a value).
4. **Inferred.**  A call that opens a connection of its own (or comes with none) and
   declares nothing joins the session of the same *principal* (the bearer token the
   client presented and the name the client gave itself) whose earlier output showed one
   of the call's argument values, provided that session was active within
   ``link_window_s``; else it starts a session of its own.  Only *grounded* values link: a
   word (no whitespace) of 3 to 200 characters with a digit or an ``@`` in it (an id, an
   email), or a number of six digits or more, that an output of the session showed (as
   a value, or as a word of a text); never a date, a time, an amount or a shorter number,
   which unrelated sessions show alike.  The most recently active such session wins.

Declared ids are scoped by principal: a client cannot add steps to another token's
session by naming its id.  An inferred session that no second call joined has an
unknown context (its one call may have followed calls the gateway could not tie to it):
it is never reported, so it can neither teach a rule nor count as a success against one
whose features it could not show (:class:`~sidecar.agents.gateway.guard.sessions.SessionBook`).

Limits and failure modes of inference, by design:

- two tasks of one principal on the same object at once (the same order id shown to
  both) are merged into one session; a client that keeps its MCP session, or declares an
  id, is never merged, nor is a trace once two calls shared it;
- a call whose arguments came from the user rather than from an earlier output starts a
  new session: a task whose calls share no value is split, and a piece of one call is
  not learned from;
- a value that many sessions showed links to the most recently active of them;
- a call made more than ``link_window_s`` after its session's last activity starts a
  new session; an inferred session is concluded (and reported) that long after its
  last activity;
- ``report_outcome`` from such a client declares the principal's most recently active
  inferred session.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import unquote

SESSION_HEADER = "sidecar-session"
"""The HTTP header a client may name its session with (any case)."""
SESSION_META_KEY = "sidecar/session"
BAGGAGE_KEYS = ("session.id", "gen_ai.conversation.id")
TRACE_META_KEYS = ("trace_id", "traceId")
MAX_ID = 200
"""Characters of a declared id kept."""
MAX_BAGGAGE = 8_192
"""The W3C limit on a baggage header; a longer one is not read."""
MAX_VALUES_PER_STEP = 256
MAX_VALUE = 200
MIN_NUMBER = 100_000
MIN_DIGITS = 6
"""A number links only with this many digits: a count, a year, a price or a quantity
is shown by many unrelated sessions."""
_DATE = re.compile(
    r"\d{4}-\d{1,2}(-\d{1,2})?([T_]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?"
    r"|\d{1,2}[/.-]\d{1,2}[/.-]\d{2,4}|\d{4}/\d{1,2}/\d{1,2}|\d{8}T\d{4,6}Z?"
)
_TIME = re.compile(r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?([ap]m|Z)?", re.IGNORECASE)
_NUMERIC = re.compile(r"[+-]?[$€£]?[\d.,_]+%?")
_TEXT_SPLIT = re.compile(r"[\s,;()\[\]{}<>\"'`|]+")
_TRIM = ".:!?"
_SPACE = re.compile(r"\s")

How = Literal["mcp", "declared", "trace", "linked", "new"]


@dataclass
class ConnectionState:
    """What the gateway keeps per MCP connection (handshake era)."""

    id: str
    principal: str
    requests: int = 0
    """Requests seen on it before the current one (the handshake aside)."""
    calls: int = 0
    key: str | None = None
    """The agent session its calls belong to, once it made one."""
    kept: bool = False
    """Its client keeps it as its session: it made a request before its first call, or
    a second call (a request after its one call, such as the listing a client makes to
    check a result against the tool's output schema, says nothing)."""


@dataclass(frozen=True)
class Origin:
    """Where a call comes from."""

    principal: str
    connection: ConnectionState | None
    declared: str | None
    trace: str | None = None
    """The trace the request carries (``trace:<id>``), when it declares nothing else."""


@dataclass(frozen=True)
class Link:
    key: str
    how: How
    principal: str
    tentative: bool = False
    """A session a trace seen for the first time opens: its context is not known yet."""

    @property
    def inferred(self) -> bool:
        """The session's context is not known yet: the linker inferred it (a new one, or
        one it joined), or a trace seen once opened it."""
        return self.how in ("new", "linked") or self.tentative


class Sessions(Protocol):
    """What the linker asks of the sessions it links into
    (:class:`~sidecar.agents.gateway.guard.sessions.SessionBook`)."""

    def link(self, principal: str, values: Iterable[str], call: str = "") -> str | None: ...

    def latest(self, principal: str) -> str | None: ...

    def hold(self, key: str) -> None: ...

    def __contains__(self, key: object) -> bool: ...


class Linker:
    """Assigns each call to its agent session, in the order the module says."""

    def __init__(self, sessions: Sessions) -> None:
        self.sessions = sessions
        self.stats: dict[How, int] = {"mcp": 0, "declared": 0, "trace": 0, "linked": 0, "new": 0}

    def for_call(self, origin: Origin, tool: str, arguments: Mapping[str, Any]) -> Link:
        """The session of a call of the upstream tool ``tool`` with ``arguments``."""
        values, call = argument_values(arguments), call_key(tool, arguments)
        link = self._resolve(origin, lambda: self.sessions.link(origin.principal, values, call))
        if link is None:
            # a session of its own, whose handle the client may send back to declare it
            # (:data:`SESSION_META_KEY`): its key is the declared session's
            key = f"{origin.principal}|named:{new_handle()}"
            link = self._bind(origin, Link(key, "new", origin.principal))
        self.stats[link.how] += 1
        self.called(origin.connection)
        return link

    def for_own_tool(self, origin: Origin) -> Link | None:
        """The session ``search_tools`` and ``report_outcome`` speak of: for a client that
        keeps no session and declares none, the principal's most recently active inferred
        session (``None`` when there is none)."""
        link = self._resolve(origin, lambda: self.sessions.latest(origin.principal))
        self.called(origin.connection)
        return link

    def request(self, connection: ConnectionState | None) -> None:
        """Another request (``tools/list``, resources...) was handled on ``connection``."""
        if connection is not None:
            connection.requests += 1

    def called(self, connection: ConnectionState | None) -> None:
        """A call (of any tool) was made on ``connection``: a second one shows a client
        that keeps its session."""
        if connection is None:
            return
        connection.requests += 1
        connection.calls += 1
        if connection.calls > 1 and connection.key is not None:
            connection.kept = True
            self.sessions.hold(connection.key)

    def _resolve(self, origin: Origin, infer: Callable[[], str | None]) -> Link | None:
        conn, who = origin.connection, origin.principal
        if conn is not None and conn.key is not None:
            return Link(conn.key, "mcp", who)
        if conn is not None and conn.requests > 0:
            conn.kept = True
        if origin.declared is not None:
            return self._bind(origin, Link(f"{who}|{origin.declared}", "declared", who))
        if origin.trace is not None:
            return self._bind(origin, self._traced(origin, origin.trace, infer))
        if conn is not None and conn.kept:
            return self._bind(origin, Link(conn.id, "mcp", who))
        found = infer()
        return None if found is None else self._bind(origin, Link(found, "linked", who))

    def _traced(self, origin: Origin, trace: str, infer: Callable[[], str | None]) -> Link:
        who, conn = origin.principal, origin.connection
        key = f"{who}|{trace}"
        if key in self.sessions:
            self.sessions.hold(key)  # a trace two calls share is a task's
            return Link(key, "trace", who)
        kept = conn is not None and conn.kept
        if not kept:
            # perhaps a trace of one request (an agent with no span of its own): the
            # call may belong to the session whose output it uses
            found = infer()
            if found is not None:
                return Link(found, "linked", who)
        return Link(key, "trace", who, tentative=not kept)

    @staticmethod
    def _bind(origin: Origin, link: Link) -> Link:
        if origin.connection is not None:
            origin.connection.key = link.key
        return link


def new_handle() -> str:
    """A session handle a client may declare (``_meta["sidecar/session"]``): 128 random
    bits, and scoped by principal besides."""
    return f"gw-{uuid.uuid4().hex}"


def handle_of(link: Link) -> str | None:
    """The handle of a session a client may declare to continue it: one the gateway
    opened (or joined) for a call that declared nothing."""
    if link.how not in ("new", "linked"):
        return None
    _who, _, declared = link.key.partition("|named:")
    return declared or None


def new_connection(principal: str) -> ConnectionState:
    return ConnectionState(f"conn:{uuid.uuid4().hex}", principal)


def principal_of(authorization: str | None, client_name: str | None, token_name: str = "") -> str:
    """Who calls: the named token's name (when it was one), a digest of the bearer token
    presented (never the token), and the name the client gave itself."""
    token = hashlib.sha256((authorization or "").encode()).hexdigest()[:16]
    key = f"{token}/{(client_name or '')[:64]}"
    return f"{token_name}@{key}" if token_name else key


def token_name(principal: str) -> str:
    """The named token a principal (:func:`principal_of`) called with (``""``: the
    home's token, or none)."""
    name, at, _rest = principal.partition("@")
    return name if at and "/" not in name else ""


# ---- what a request declares ----------------------------------------------------------
def declared_session(headers: Mapping[str, str], meta: Mapping[str, Any]) -> str | None:
    """The session a request names, in order: baggage, the sidecar's own header or
    ``_meta`` key; ``_meta`` before the HTTP header for each."""
    for raw in (meta.get("baggage"), headers.get("baggage")):
        found = _baggage_session(raw)
        if found is not None:
            return found
    for raw in (meta.get(SESSION_META_KEY), headers.get(SESSION_HEADER)):
        if isinstance(raw, str) and raw.strip():
            return f"named:{raw.strip()[:MAX_ID]}"
    return None


def trace_session(headers: Mapping[str, str], meta: Mapping[str, Any]) -> str | None:
    """The trace a request carries (``_meta`` before the HTTP header)."""
    for raw in (meta.get("traceparent"), headers.get("traceparent")):
        trace = trace_id(raw)
        if trace is not None:
            return f"trace:{trace}"
    for key in TRACE_META_KEYS:
        trace = _trace_hex(meta.get(key))
        if trace is not None:
            return f"trace:{trace}"
    return None


def trace_id(traceparent: Any) -> str | None:
    """The trace id of a W3C ``traceparent`` (``None`` when it is not one)."""
    if not isinstance(traceparent, str):
        return None
    parts = traceparent.strip().split("-")
    return _trace_hex(parts[1]) if len(parts) >= 4 else None


def _trace_hex(value: Any) -> str | None:
    """A 32-hex-digit trace id, not all zeros (invalid in W3C Trace Context)."""
    if isinstance(value, str) and re.fullmatch(r"[0-9a-fA-F]{32}", value) and value.strip("0"):
        return value.lower()
    return None


def _baggage_session(raw: Any) -> str | None:
    if not isinstance(raw, str) or len(raw) > MAX_BAGGAGE:
        return None
    entries: dict[str, str] = {}
    for member in raw.split(","):
        pair = member.split(";", 1)[0]
        key, sep, value = pair.partition("=")
        if sep:
            entries[unquote(key.strip())] = unquote(value.strip())
    for key in BAGGAGE_KEYS:
        value = entries.get(key, "").strip()
        if value:
            return f"baggage:{key}={value[:MAX_ID]}"
    return None


# ---- grounded values --------------------------------------------------------------------
def grounded(value: Any) -> str | None:
    """``value`` as a string when it may link calls (an id, an email, a number of six
    digits or more), else ``None``.  A value many unrelated sessions show is no link: a
    date or a time, an amount, a small number, a word with no digit."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value) if abs(value) >= MIN_NUMBER else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not 3 <= len(text) <= MAX_VALUE or "[REDACTED]" in text or _SPACE.search(text):
        return None
    if _DATE.fullmatch(text) or _TIME.fullmatch(text):
        return None
    if _NUMERIC.fullmatch(text):
        return text if sum(ch.isdigit() for ch in text) >= MIN_DIGITS and "." not in text else None
    if any(ch.isdigit() for ch in text) or "@" in text:
        return text
    return None


def call_key(tool: str, arguments: Mapping[str, Any]) -> str:
    """One call, by its tool and arguments (a digest)."""
    text = json.dumps([tool, arguments], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def argument_values(arguments: Mapping[str, Any]) -> frozenset[str]:
    """The grounded values among a call's arguments (top level and one level down)."""
    found: set[str] = set()
    for value in arguments.values():
        items = value if isinstance(value, list) else [value]
        for item in items[:MAX_VALUES_PER_STEP]:
            if isinstance(item, Mapping):
                found.update(v for v in map(grounded, list(item.values())[:64]) if v)
            elif (g := grounded(item)) is not None:
                found.add(g)
    return frozenset(found)


def output_values(output: Any) -> list[str]:
    """The grounded values an output showed: its scalars, and the words of its texts."""
    return list(_take(_leaves(output, 0), MAX_VALUES_PER_STEP))


def _leaves(value: Any, depth: int) -> Iterator[str]:
    if depth > 8:
        return
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item, depth + 1)
    elif isinstance(value, str):
        whole = grounded(value)
        if whole is not None:
            yield whole
        if len(value) > 3:
            for word in _TEXT_SPLIT.split(value[:20_000]):
                found = grounded(word.strip(_TRIM))
                if found is not None and found != whole:
                    yield found
    else:
        found = grounded(value)
        if found is not None:
            yield found


def _take(values: Iterable[str], n: int) -> Iterator[str]:
    seen: set[str] = set()
    for value in values:
        if value not in seen:
            seen.add(value)
            yield value
            if len(seen) >= n:
                return
