"""Who is asking: named tokens with roles, and the sources evidence is attributed to
(what an untrusted one may spend: :mod:`sidecar.trust.quota`).

Roles:

- **agent**: look up tools, check plans and calls, report sessions;
- **operator**: everything an agent may, and what changes the memory by hand or moves
  tools: hand-written conditions, lifts and reinstatements, eviction, restore,
  forgetting a source, adding tools.

Tokens are configured in one JSON file (``SIDECAR_TOKENS_FILE``, else the home's
``tokens.json`` when it exists)::

    {"tokens": [
      {"name": "alice", "role": "agent", "token_sha256": "<hex sha256 of the token>"},
      {"name": "ci-bot", "role": "agent", "token": "<the token>", "trusted": true},
      {"name": "ops", "role": "operator", "token_sha256": "..."}
    ]}

A token is compared as it is once its surrounding whitespace is stripped, and is checked
in that form when it is read: one that is empty or shorter than :data:`MIN_TOKEN`
characters, the same token in two entries (or in an entry and ``SIDECAR_TOKEN``), and a
``token_sha256`` of the empty token are refused at start (:class:`~sidecar.errors.
ConfigError`), so that no entry can make an empty or blank ``Authorization: Bearer``
anyone; an empty presented token matches nothing.  A token's *name* is no secret: a
refusal names it.

The home's single token of before (``SIDECAR_TOKEN`` or the ``token`` file) still works:
it is an operator, and what it reports is the ``local`` source's, like what the process
reports through the library itself.  A named token's *name* is the source of everything
it reports; operators are trusted, agents are not unless marked ``trusted``.  Evidence the process
reports through the library itself is the ``local`` source; what the MCP gateway
observed of a token's calls is ``gateway:<name>``; what a token exported as OTLP traces
is ``otlp:<name>``, trusted only when that source or the token is
(:mod:`sidecar.trust.sources`).  A token's name may not start with ``gateway:`` or ``otlp:``:
it would pass for another token's route.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sidecar.errors import ConfigError, InvalidInput
from sidecar.trust.sources import GATEWAY as GATEWAY
from sidecar.trust.sources import LOCAL as LOCAL
from sidecar.trust.sources import OTLP as OTLP
from sidecar.trust.sources import ROUTE_PREFIXES

Role = Literal["agent", "operator"]
ROLES: tuple[Role, ...] = ("agent", "operator")
TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
"""A token's name, which is the source of what it reports."""
SOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,79}")
"""A source's name: a token's, or one derived from it (``gateway:<name>``,
``otlp:<name>``); no ``/`` (it prefixes the keys of the sessions it reports)."""
RESERVED = frozenset({LOCAL, GATEWAY, OTLP})
MIN_TOKEN = 16
"""The fewest characters of a token, once its surrounding whitespace is stripped."""


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    trusted: bool

    @property
    def operator(self) -> bool:
        return self.role == "operator"


THE_OPERATOR = Principal(LOCAL, "operator", True)
"""The home's single token: the home's owner, whose reports are the ``local`` source's,
as the process's own are (a batch sent through the server and again locally is one)."""
THE_PROCESS = Principal(LOCAL, "operator", True)
PRINCIPAL = "sidecar.principal"
"""Where the HTTP layer leaves the caller, in the request's state."""


def principal_of(scope: Mapping[str, Any] | None) -> Principal | None:
    """The caller an authenticated HTTP request carries (``None`` outside one)."""
    state = (scope or {}).get("state") or {}
    found = state.get(PRINCIPAL) if isinstance(state, Mapping) else None
    return found if isinstance(found, Principal) else None


def check_source(name: str) -> str:
    if not isinstance(name, str) or not SOURCE_NAME.fullmatch(name):
        raise InvalidInput(
            f"a source name is 1-80 letters, digits, '_', '.', ':' or '-', got {name!r}"
        )
    return name


def _digest(token: str | bytes) -> bytes:
    raw = token.encode() if isinstance(token, str) else token
    return hashlib.sha256(raw.strip()).digest()


EMPTY_DIGEST = _digest(b"")


def check_token(token: str, where: str) -> str:
    """``token`` as it is compared (its surrounding whitespace stripped), or
    :class:`~sidecar.errors.ConfigError` naming ``where`` when that is empty or shorter
    than :data:`MIN_TOKEN` characters."""
    stripped = token.strip()
    if not stripped:
        raise ConfigError(f"{where} is empty once its whitespace is stripped: set a real token")
    if len(stripped) < MIN_TOKEN:
        raise ConfigError(
            f"{where} has {len(stripped)} characters once its whitespace is stripped; a token "
            f"needs {MIN_TOKEN} or more"
        )
    return stripped


class Principals:
    """The tokens a server accepts, each with its principal."""

    def __init__(self, entries: Iterable[tuple[Principal, bytes]] = ()) -> None:
        self._entries = list(entries)
        names = [p.name for p, _ in self._entries]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"each token needs a name of its own; {twice[0]!r} names two")
        _refuse_shared(self._entries)

    @classmethod
    def load(cls, path: Path | None, token: str | None) -> Principals:
        """The operator's single ``token`` (when given: ``None`` means none) and the
        tokens of ``path`` (when the file exists; whether a named file must exist is the
        settings' to check)."""
        entries: list[tuple[Principal, bytes]] = []
        if token is not None:
            # compared in the form it was checked in (str.strip also strips what
            # bytes.strip does not, such as a no-break space)
            checked = check_token(
                token, "the operator's token ($SIDECAR_TOKEN or the home's token file)"
            )
            entries.append((THE_OPERATOR, _digest(checked)))
        if path is not None and path.exists():
            entries += _read(path)
        return cls(entries)

    def authenticate(self, presented: bytes) -> Principal | None:
        """The principal of a presented bearer token (compared by digest, in constant
        time per entry, every entry compared), or ``None``; an empty one is nobody's."""
        digest = _digest(presented)
        if hmac.compare_digest(digest, EMPTY_DIGEST):
            return None
        found: Principal | None = None
        for principal, expected in self._entries:
            if hmac.compare_digest(digest, expected) and found is None:
                found = principal
        return found

    def named(self) -> Principals:
        """The named tokens alone, for a server that compares the home's token itself
        (loaded with it all the same, so that a named entry holding it is refused)."""
        return Principals(e for e in self._entries if e[0] is not THE_OPERATOR)

    def trusted(self) -> frozenset[str]:
        return frozenset(p.name for p, _ in self._entries if p.trusted)

    def role_of(self, name: str) -> Role | None:
        """The role of the named token ``name`` (``None``: no such token)."""
        return next((p.role for p, _ in self._entries if p.name == name), None)

    def names(self) -> list[tuple[str, Role]]:
        """Each token's name and role (the home's single token is ``local``'s)."""
        return [(p.name, p.role) for p, _ in self._entries]

    def __len__(self) -> int:
        return len(self._entries)


def _refuse_shared(entries: list[tuple[Principal, bytes]]) -> None:
    """One token is one principal: the same token under two names would be the first
    one's (and with two roles, the stronger role could hide behind the weaker name)."""
    first: dict[bytes, Principal] = {}
    for principal, digest in entries:
        if digest == EMPTY_DIGEST:
            raise ConfigError(f"the token named {principal.name!r} is the empty token")
        other = first.setdefault(digest, principal)
        if other is principal:
            continue
        if other.role != principal.role:
            raise ConfigError(
                f"among the tokens, {other.name!r} and {principal.name!r} are one token with "
                f"two roles ({other.role} and {principal.role}): give each its own token"
            )
        raise ConfigError(
            f"among the tokens, {other.name!r} and {principal.name!r} are the same token: "
            "give each its own"
        )


def _read(path: Path) -> list[tuple[Principal, bytes]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"tokens file {path}: {exc}") from exc
    rows = data.get("tokens") if isinstance(data, Mapping) else None
    if not isinstance(rows, list):
        raise ConfigError(f'tokens file {path}: expected {{"tokens": [...]}}')
    out: list[tuple[Principal, bytes]] = []
    for i, row in enumerate(rows):
        out.append(_entry(row, f"tokens file {path}, entry {i}"))
    return out


def _entry(row: Any, where: str) -> tuple[Principal, bytes]:
    if not isinstance(row, Mapping):
        raise ConfigError(f"{where}: expected an object")
    name, role = row.get("name"), row.get("role", "agent")
    if not isinstance(name, str) or not TOKEN_NAME.fullmatch(name) or name in RESERVED:
        raise ConfigError(
            f"{where}: 'name' must be 1-64 letters, digits, '_', '.', ':' or '-', and not "
            f"{' or '.join(sorted(RESERVED))}"
        )
    if name.startswith(ROUTE_PREFIXES):
        raise ConfigError(
            f"{where}: 'name' may not start with {' or '.join(ROUTE_PREFIXES)} (the sources of "
            "another token's gateway calls and traces)"
        )
    if role not in ROLES:
        raise ConfigError(f"{where}: 'role' must be one of {', '.join(ROLES)}")
    trusted = row.get("trusted", role == "operator")
    if not isinstance(trusted, bool):
        raise ConfigError(f"{where}: 'trusted' must be true or false")
    hashed, plain = row.get("token_sha256"), row.get("token")
    if isinstance(hashed, str) and re.fullmatch(r"[0-9a-fA-F]{64}", hashed):
        digest = bytes.fromhex(hashed)
    elif isinstance(plain, str):
        digest = _digest(check_token(plain, f"{where}: 'token'"))
    else:
        raise ConfigError(
            f"{where}: needs 'token_sha256' (64 hex digits) or a 'token' of {MIN_TOKEN}+"
        )
    return Principal(name, role, trusted), digest
