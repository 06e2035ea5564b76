"""The common dialect as PostgreSQL spells it, and psycopg's errors and URLs as the
sidecar shows them (see :mod:`sidecar.storage.backends.postgres`, *Translation*)."""

from __future__ import annotations

import re
from functools import lru_cache

from sidecar.storage.base import DatabaseError, MissingTable
from sidecar.trust.redact import scrub
from sidecar.trust.secretshapes import url_secrets

_PG_TYPES = {"REAL": "DOUBLE PRECISION", "INTEGER": "BIGINT", "TEXT": 'TEXT COLLATE "C"'}
_TYPE_WORDS = re.compile(r"\b(REAL|INTEGER|TEXT)\b")
_DDL = re.compile(r"\s*(CREATE\s+TABLE|ALTER\s+TABLE)\b", re.IGNORECASE)
_OR_IGNORE = re.compile(r"\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.IGNORECASE)
_OR_REPLACE = re.compile(r"\s*INSERT\s+OR\s+REPLACE\b", re.IGNORECASE)


@lru_cache(maxsize=2048)
def translate(sql: str) -> str:
    """A statement of the common dialect as PostgreSQL (and psycopg's ``%s``) spell it."""
    if _OR_REPLACE.match(sql):
        raise ValueError("INSERT OR REPLACE has no PostgreSQL form: write an upsert")
    if _DDL.match(sql):
        sql = _TYPE_WORDS.sub(lambda m: _PG_TYPES[m.group(1)], sql)
    ignore = _OR_IGNORE.match(sql)
    if ignore:
        sql = "INSERT INTO" + sql[ignore.end() :].rstrip().rstrip(";") + " ON CONFLICT DO NOTHING"
    return _placeholders(sql)


def _placeholders(sql: str) -> str:
    out: list[str] = []
    quote: str | None = None
    for ch in sql:
        if ch == "%":
            out.append("%%")
            continue
        if quote is not None:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "?":
            out.append("%s")
            continue
        out.append(ch)
    return "".join(out)


def failure(exc: Exception) -> DatabaseError:
    """The storage error for what psycopg raised."""
    import psycopg.errors

    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, psycopg.errors.UndefinedTable):
        return MissingTable(f"the state database cannot serve this: {text}", text)
    return DatabaseError(f"the state database cannot serve this: {text}", text)


def display(url: str) -> str:
    """The URL without its password, for messages: no part of the password appears even
    when the URL is not what it seems (a password holding ``/`` or ``@`` that was not
    percent-encoded makes a parser read pieces of it as the host, port or database)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        info = conninfo_to_dict(url)
    except Exception:
        return "postgresql://(unparsable URL)"
    host = info.get("host", "localhost")
    port = info.get("port", "5432")
    user = f"{info['user']}@" if info.get("user") else ""
    return safe(f"postgresql://{user}{host}:{port}/{info.get('dbname', '')}", url)


def safe(text: str, url: str) -> str:
    """``text`` (a message about the database at ``url``) with every part of the URL's
    password masked, and redacted (see :func:`sidecar.trust.secretshapes.url_secrets`)."""
    return scrub(text, url_secrets(url))
