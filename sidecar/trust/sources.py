"""Source names: who a piece of evidence is attributed to, which of them are trusted,
and which token each speaks for.

- ``local``: the process itself, and the home's own token;
- ``<name>``: what a named token reported (``/v1/reports``, the MCP server);
- ``gateway:<name>``: what the gateway observed of that token's calls between it and
  the upstreams; ``gateway`` alone for the home's token (or a gateway with none);
- ``otlp:<name>``: what that token exported as OTLP traces (the token's own word, by
  another route); ``otlp`` alone when no token is known.

Evidence counts as independent when two *witnesses* stand behind it, or a trusted
one.  The token behind ``otlp:<name>`` and ``gateway:<name>`` is the witness of its
reports, its traces and its gateway sessions: one token sending the same failure by
three routes is still one witness.  The gateway vouches that an upstream answered what
it answered, but the agent chose the calls, declared the outcome and wrote the task
text: its sessions weigh as the token does, trusted only when the token is.
"""

from __future__ import annotations

from collections.abc import Iterable

LOCAL = "local"
GATEWAY = "gateway"
OTLP = "otlp"
GATEWAY_PREFIX = f"{GATEWAY}:"
OTLP_PREFIX = f"{OTLP}:"
ROUTE_PREFIXES = (GATEWAY_PREFIX, OTLP_PREFIX)
"""Prefixes of the sources derived from a token's name: no token's name starts so."""


def otlp_source(token: str) -> str:
    """The source of what ``token`` (its name; empty: not known) sent as traces."""
    return f"{OTLP_PREFIX}{token}" if token else OTLP


def token_of(source: str) -> str:
    """The token whose calls a source's evidence is about (its report rate applies)."""
    for prefix in ROUTE_PREFIXES:
        if source.startswith(prefix):
            return source[len(prefix) :]
    return source


def witness(source: str) -> str:
    """Who vouches for a source's evidence: the token itself for what it exported as
    traces (``otlp:<name>``) or called through the gateway (``gateway:<name>``); every
    other source for its own."""
    return token_of(source)


def witnesses(sources: Iterable[str]) -> set[str]:
    return {witness(s) for s in sources}


def is_trusted(source: str, trusted: frozenset[str]) -> bool:
    """Whether ``source`` is trusted: named in ``trusted``, or prefixed by a name there
    ending with ``:`` (an operator's explicit choice, ``gateway:`` trusting every token's
    gateway sessions); a token's traces and gateway sessions (``otlp:<name>``,
    ``gateway:<name>``) also when the token itself is trusted."""
    if source in trusted:
        return True
    if any(t.endswith(":") and source.startswith(t) for t in trusted):
        return True
    return source.startswith(ROUTE_PREFIXES) and witness(source) in trusted


def reached_by_forget(source: str) -> list[str]:
    """The sources forgetting ``source`` removes: a token's evidence whatever the route
    (what it reported, what the gateway observed of its calls, what it exported as
    traces); one route's alone when a route is named."""
    if source.startswith(ROUTE_PREFIXES):
        return [source]
    return [source, f"{GATEWAY_PREFIX}{source}", f"{OTLP_PREFIX}{source}"]
