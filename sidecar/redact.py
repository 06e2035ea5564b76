"""Secret redaction for everything the sidecar persists or prints.

Two nets: by *name* (a mapping key such as ``Authorization`` or ``api_key`` has its
value replaced whole) and by *value* (known token formats found anywhere in text).
:func:`looks_like_secret` is the stricter test applied to credential references, which
must name a credential and never carry one.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

MASK = "[REDACTED]"

_SENSITIVE_KEY_PARTS = (
    "authorization",
    "api_key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "cookie",
    "private_key",
    "privatekey",
    "credential",
    "session_key",
    "access_key",
)

# (name, pattern, group to mask: 0 = whole match)
_VALUE_PATTERNS: tuple[tuple[str, re.Pattern[str], int], ...] = (
    (
        "private key",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
            re.S,
        ),
        0,
    ),
    ("aws access key id", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"), 0),
    (
        "github token",
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})"),
        0,
    ),
    ("openai/anthropic key", re.compile(r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_\-]{20,}"), 0),
    ("stripe key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"), 0),
    ("slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), 0),
    ("google api key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}"), 0),
    (
        "gitlab token",
        re.compile(
            r"\b(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|gloas)-[A-Za-z0-9_\-]{20,}"
        ),
        0,
    ),
    ("npm token", re.compile(r"\bnpm_[A-Za-z0-9]{36}"), 0),
    ("pypi token", re.compile(r"\bpypi-[A-Za-z0-9_\-]{50,}"), 0),
    ("sendgrid key", re.compile(r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}"), 0),
    ("twilio key", re.compile(r"\b(?:AC|SK)[a-z0-9]{32}\b"), 0),
    ("square token", re.compile(r"\bsq0(?:csp|atp)-[0-9A-Za-z\-_]{22,43}"), 0),
    ("mailchimp key", re.compile(r"\b[0-9a-f]{32}-us[0-9]{1,2}\b"), 0),
    ("telegram bot token", re.compile(r"\b\d{8,10}:[0-9A-Za-z_\-]{35}\b"), 0),
    (
        "slack webhook",
        re.compile(r"https://hooks\.slack\.com/services/T[\w]+/B[\w]+/[\w]+", re.I),
        0,
    ),
    (
        "azure storage key",
        re.compile(r"(?i)\b(?:account|shared[_ ]?access)[_ ]?key\s*=\s*([A-Za-z0-9+/=]{20,})"),
        1,
    ),
    ("sas signature", re.compile(r"(?i)[?&]sig=([A-Za-z0-9%+/=]{16,})"), 1),
    (
        "jwt",
        re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
        0,
    ),
    ("bearer token", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/\-]{8,}=*)"), 1),
    ("token", re.compile(r"(?i)\btoken\s+((?=\S*\d)[A-Za-z0-9._~+/\-]{16,}=*)"), 1),
    ("basic auth", re.compile(r"(?i)\bbasic\s+([A-Za-z0-9+/]{8,}=*)"), 1),
    # through the last "@" before the host: a password may itself hold "@"
    ("url userinfo", re.compile(r"(?<=://)([^/\s:@]+:[^/\s]*)@(?=[^/\s@:]+)"), 1),
    # the name=value pairs of the header, not the rest of its line
    (
        "cookie header",
        re.compile(
            r"(?im)\b(?:set-)?cookie\s*[:=]\s*"
            r"([^\s;=,]+=[^;\r\n]*?(?:;[ \t]*[^\s;=,]+=[^;\r\n]*?)*)(?=;|[\r\n]|$)"
        ),
        1,
    ),
    (
        "key=value secret",
        re.compile(
            # not a path ("/etc/passwd: ..."), and a value is not a URI ("passwd: see
            # cold://chains/..." names no secret)
            r"(?i)(?<![/\\.])\b(?:[a-z_\-]*(?:api[_\-]?key|token|secret|password|passwd|pwd|"
            r"cookie|authorization|access[_\-]?key))\b[\"']?\s*[=:]\s*[\"']?"
            r"(?![a-z][a-z0-9+.\-]*://|\[REDACTED\])"
            r"((?:(?:bearer|basic|token)\s+)?[^\s\"'&,;}]{3,})"
        ),
        1,
    ),
)


def _least_width(pattern: re.Pattern[str]) -> int:
    """The fewest characters a match of ``pattern`` spans (lookarounds count 0), so that a
    shorter text can skip it: most values an agent passes are a few characters long."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        return int(_parser.parse(pattern.pattern, pattern.flags).getwidth()[0])
    except Exception:  # another Python's parser: no shortcut, never a missed secret
        return 0


_PATTERNS = tuple((p, group, _least_width(p)) for _name, p, group in _VALUE_PATTERNS)


@functools.lru_cache(maxsize=4096)
def is_sensitive_key(name: str) -> bool:
    norm = name.lower().replace("-", "_")
    return any(part in norm for part in _SENSITIVE_KEY_PARTS)


def redact_text(text: str) -> str:
    for pattern, group, least in _PATTERNS:
        if len(text) < least:
            continue
        if group == 0:
            text = pattern.sub(MASK, text)
        else:
            text = pattern.sub(functools.partial(_mask_group, group=group), text)
    return text


def _mask_group(match: re.Match[str], group: int) -> str:
    whole = match.group(0)
    start = match.start(group) - match.start(0)
    end = match.end(group) - match.start(0)
    return whole[:start] + MASK + whole[end:]


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like) with secrets masked, by key name and by pattern."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            skey = str(key)
            if is_sensitive_key(skey) and item not in (None, "", [], {}):
                masked: Any = MASK if not isinstance(item, Mapping | list) else redact_all(item)
            else:
                masked = redact(item)
            out[_unique(out, _safe_key(skey))] = masked
        return out
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def _safe_key(key: str) -> str:
    # a key may be a secret too: masked whole when it looks like one
    if len(key) > _CACHED_KEY_CHARS:
        return MASK if looks_like_secret(key) else redact_text(key)
    return _safe_short_key(key)


_CACHED_KEY_CHARS = 64


@functools.lru_cache(maxsize=4096)
def _safe_short_key(key: str) -> str:
    # keys repeat (every span of a trace has the same few): 26 patterns per key and per
    # occurrence were most of the cost of taking in a trace
    return MASK if looks_like_secret(key) else redact_text(key)


def _unique(taken: Mapping[str, Any], key: str) -> str:
    """Two keys masked alike stay two keys."""
    if key not in taken:
        return key
    n = 2
    while f"{key}#{n}" in taken:
        n += 1
    return f"{key}#{n}"


def redact_all(value: Any) -> Any:
    """Mask every leaf: used under a sensitive key whose value is a structure."""
    if isinstance(value, Mapping):
        return {str(k): redact_all(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_all(v) for v in value]
    return MASK


def _entropy(text: str) -> float:
    counts = Counter(text)
    total = len(text)
    return -sum(c / total * math.log2(c / total) for c in counts.values())


def looks_like_secret(value: str) -> str | None:
    """Why ``value`` looks like a secret (a known token format, or a long random string
    with no scheme or path), else ``None``."""
    for name, pattern, _group in _VALUE_PATTERNS:
        for match in pattern.finditer(value):
            # "secret:prod/db" in an ARN names a secret; "token=abc123" carries one
            if name == "key=value secret" and "=" not in match.group(0):
                continue
            return name
    # no scheme ("vault://", "env:", "arn:"): a long random-looking string is a value
    schemeless = "://" not in value and not re.match(r"[A-Za-z][A-Za-z0-9+.\-]*:", value)
    if schemeless and len(value) >= 24 and " " not in value:
        classes = sum(
            (
                any(c.islower() for c in value),
                any(c.isupper() for c in value),
                any(c.isdigit() for c in value),
            )
        )
        # a path ("kv/prod/openai-key") has separators but rarely all three classes
        needed = 3 if "/" in value else 2
        if _entropy(value) >= 3.5 and classes >= needed:
            return "high-entropy string"
    return None


_EXAMPLE_KEYS = frozenset({"default", "example", "examples", "const", "enum"})


def redact_schema(schema: Any, sensitive: bool = False) -> Any:
    """A JSON schema with secrets masked, its structure kept: every string is checked
    against the value patterns, and example values (``default``, ``example(s)``,
    ``const``, ``enum``) of a property with a sensitive name are masked whole.  Keys are
    never treated as secrets, since a property *named* ``api_key`` is a definition."""
    if isinstance(schema, str):
        return redact_text(schema)
    if isinstance(schema, list | tuple):
        return [redact_schema(v, sensitive) for v in schema]
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, Mapping):
            out[key] = {
                name: redact_schema(prop, is_sensitive_key(str(name)))
                for name, prop in value.items()
            }
        elif key in _EXAMPLE_KEYS and value not in (None, "", [], {}):
            # example values are data: mask whole under a sensitive property, else apply
            # the key-name and value rules to them
            out[key] = redact_all(value) if sensitive else redact(value)
        else:
            out[key] = redact_schema(value, sensitive)
    return out
