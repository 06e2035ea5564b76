"""Secret redaction for everything the sidecar persists or prints.

Three nets:

- by *name*: the value under a sensitive key is replaced whole, and so is the value of
  a name/value pair whose name is sensitive (``[{"name": "X-API-Key", "value": ...}]``,
  ``[["Authorization", "Bearer ..."]]``);
- by *value*: known token formats found anywhere in text (cloud and SaaS keys, JWTs,
  PEM blocks, URL passwords);
- by *context* in text: ``name=value`` and ``name: value``, JSON members (``"pwd":
  "..."``, escaped inside a string or not), URL query parameters (``?key=``,
  ``token=``, ``sig=``), a quoted value after a secret's noun (``Invalid API key
  'X'``), phrases (``my password is X``), and a YAML value on the lines under its key
  (``password: |``; :mod:`sidecar.trust.secretblocks`).  A text that is a whole JSON document
  is parsed and redacted as a structure.

Key names are compared by their words (split at separators and case changes, then
lower-cased), so ``apiKey``, ``X-API-Key``, ``api_key`` and ``APIKEY`` are one name.
A name is sensitive when a word ends with one of :data:`STRONG_PARTS` (``token``,
``secret``, ``password``, ``passphrase``, ``cookie``, ``sessionid``, ``apikey``...;
``cookies`` and ``credentials`` too, but not ``tokens``: ``max_tokens`` and
``total_tokens`` count words of text) or is one of :data:`WEAK_WORDS` (``auth``,
``pwd``, ``pass``, ``session``, ``otp``: whole words only, so ``author`` and ``oauth``
are not).  A descriptive word after it makes the name structural again
(:data:`STRUCTURAL_WORDS`: ``token_type``, ``auth_method``, ``cookie_name``,
``session_timeout``, ``password_length``): its value says how a secret is used, not
what it is, and the memory may learn from it.  Booleans are never masked by name.

``session_id`` (and ``sessionid``, ``sessionId``) is masked: in web traffic it is the
bearer credential of a session (Django's ``sessionid``, ``JSESSIONID``, ``PHPSESSID``),
and as an argument naming a conversation it is different in every session, so no
learned condition could rest on its value.  A report's own ``session_id`` field is not
an argument and keeps its value (only known token formats are masked in it).

:func:`looks_like_secret` is the stricter test applied to credential references, which
must name a credential and never carry one.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.trust.secretblocks import KEY_BLOCK, KEY_OVER_VALUE, LineRedactor, values_under_keys
from sidecar.trust.secretshapes import SHAPES, Shape, secret_shaped
from sidecar.trust.secretshapes import WHY_WORDS as _NOT_SECRETS
from sidecar.trust.secretshapes import word_of as _word_value

MASK = "[REDACTED]"

STRONG_PARTS = (
    "authorization",
    "apikey",
    "apisecret",
    "accesskey",
    "secretkey",
    "privatekey",
    "signingkey",
    "encryptionkey",
    "masterkey",
    "clientkey",
    "authkey",
    "licensekey",
    "subscriptionkey",
    "sessionkey",
    "sessionid",
    "sessid",
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "passcode",
    "cookie",
    "credential",
    "bearer",
    "jwt",
    "csrf",
    "xsrf",
)
"""Name endings that make a key sensitive (a word must end with one)."""
WEAK_WORDS = frozenset({"auth", "pwd", "pass", "session", "otp"})
"""Whole words that make a key sensitive (never inside a longer word)."""
STRUCTURAL_WORDS = frozenset(
    {
        "type", "kind", "method", "mode", "scheme", "provider", "url", "uri", "endpoint",
        "name", "field", "param", "label", "placeholder", "description", "pattern",
        "required", "enabled", "disabled", "expires", "expiry", "expiration", "exp", "ttl",
        "timeout", "lifetime", "age", "created", "updated", "changed", "last", "length",
        "len", "size", "count", "limit", "max", "min", "policy", "strategy", "strength",
        "format", "version", "status", "path", "domain", "prefix", "alg", "algorithm",
        "issuer", "audience", "scope", "scopes", "location", "rotation",
    }
)  # fmt: skip
"""Words after the sensitive one that make a key describe a secret, not hold one."""
_PLURAL_EXEMPT = frozenset({"token"})
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


@functools.lru_cache(maxsize=8192)
def key_strength(name: str) -> int:
    """2 when ``name`` ends a word with a strong part (``api_key``, ``sessionid``), 1
    when it holds a weak word (``auth``, ``pwd``), 0 when it is not sensitive."""
    words = [w.lower() for w in _WORD.findall(name)]
    if not words:
        return 0
    squashed = "".join(words)
    ends, pos = [], 0
    for word in words:
        pos += len(word)
        ends.append(pos)
    for part in STRONG_PARTS:
        start = squashed.find(part)
        while start != -1:
            end = start + len(part)
            if end not in ends and part not in _PLURAL_EXEMPT and squashed[end : end + 1] == "s":
                end += 1
            if end in ends and not STRUCTURAL_WORDS.intersection(words[ends.index(end) + 1 :]):
                return 2
            start = squashed.find(part, start + 1)
    for i, word in enumerate(words):
        if word in WEAK_WORDS and not STRUCTURAL_WORDS.intersection(words[i + 1 :]):
            return 1
    return 0


def is_sensitive_key(name: str) -> bool:
    return key_strength(name) > 0


# ---- text rules ------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    name: str
    pattern: re.Pattern[str]
    mask: int | Callable[[re.Match[str]], str] | Callable[[str], str]
    """The group to mask (0: the whole match), a function giving a match's replacement,
    or (:data:`SCANS`) a function of the whole text."""
    least: int = 0
    """The fewest characters a match spans: a shorter text skips the rule."""
    needs: tuple[str, ...] = ()
    """Lower-case texts of which every match holds one: a text holding none skips it."""


def _least_width(pattern: re.Pattern[str]) -> int:
    """The fewest characters a match of ``pattern`` spans (lookarounds count 0), so that a
    shorter text can skip it: most values an agent passes are a few characters long."""
    try:
        from re import _parser  # type: ignore[attr-defined]

        return int(_parser.parse(pattern.pattern, pattern.flags).getwidth()[0])
    except Exception:  # another Python's parser: no shortcut, never a missed secret
        return 0


def _mask_group(match: re.Match[str], group: int) -> str:
    whole = match.group(0)
    start = match.start(group) - match.start(0)
    end = match.end(group) - match.start(0)
    return whole[:start] + MASK + whole[end:]


def _masking(*groups: int, when: Callable[[re.Match[str]], bool] = lambda m: True) -> Any:
    """A replacement masking the first of ``groups`` that matched, if ``when`` holds."""

    def replace(match: re.Match[str]) -> str:
        if not when(match):
            return match.group(0)
        for group in groups:
            if match.group(group) is not None:
                return _mask_group(match, group)
        return match.group(0)

    return replace


def _query_name(match: re.Match[str]) -> bool:
    name = match.group(1)
    return key_strength(name) > 0 or "".join(_WORD.findall(name)).lower() in _QUERY_NAMES


_QUERY_NAMES = frozenset({"key", "sig", "signature", "hmac", "xamzsignature", "xgoogsignature"})


def _pair_name(match: re.Match[str]) -> bool:
    """``name=value`` for any sensitive name; ``name: value`` for a strong one only (a
    word such as "session: expired" is prose more often than a secret)."""
    strength = key_strength(match.group(1))
    if match.group(3) == "=":
        return strength > 0
    return strength == 2 and _word_value(match.group(4)) not in _NOT_SECRETS


def _phrase_value(match: re.Match[str]) -> bool:
    value = match.group(4)
    if MASK in value or _word_value(value) in _NOT_SECRETS:
        return False
    return match.group(1) is not None or secret_shaped(value)


_NOUNS = (
    r"api[\s_-]?key|access[\s_-]?key|secret(?:[\s_-]?key)?|client[\s_-]?secret|"
    r"(?:(?:access|auth|bearer|refresh|session|id|api)[\s_-]?)?token|password|passphrase|"
    r"passcode|passwd|pwd|credentials?|authorization(?:\s+header)?|session[\s_-]?id|cookie"
)
_PHRASE_NOUNS = (
    r"password|passphrase|passcode|passwd|pwd|pin|api[\s_-]?key|secret(?:\s+key)?|token|"
    r"access\s+code|security\s+code|credentials?"
)
_FRAGMENTS = (
    r"(?:auth|pwd|pass|session|sessid|cookie|token|secret|key|credential|csrf|xsrf|jwt|"
    r"bearer|otp)"
)
_NO_SCHEME = r"(?![a-z][a-z0-9+.\-]*://|\[REDACTED\])"

_SIMPLE_RULES: tuple[tuple[str, str, int, int], ...] = (
    ("private key", KEY_BLOCK, re.S, 0),
    ("aws access key id", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b", 0, 0),
    ("github token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})", 0, 0),
    ("openai/anthropic key", r"\bsk-(?:[A-Za-z0-9]+-)*[A-Za-z0-9_\-]{20,}", 0, 0),
    ("stripe key", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}", 0, 0),
    ("slack token", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}", 0, 0),
    ("google api key", r"\bAIza[0-9A-Za-z_\-]{35}", 0, 0),
    (
        "gitlab token",
        r"\b(?:glpat|gldt|glft|glsoat|glrt|glcbt|glimt|glptt|gloas)-[A-Za-z0-9_\-]{20,}",
        0,
        0,
    ),
    ("npm token", r"\bnpm_[A-Za-z0-9]{36}", 0, 0),
    ("pypi token", r"\bpypi-[A-Za-z0-9_\-]{50,}", 0, 0),
    ("sendgrid key", r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}", 0, 0),
    ("twilio key", r"\b(?:AC|SK)[a-z0-9]{32}\b", 0, 0),
    ("square token", r"\bsq0(?:csp|atp)-[0-9A-Za-z\-_]{22,43}", 0, 0),
    ("mailchimp key", r"\b[0-9a-f]{32}-us[0-9]{1,2}\b", 0, 0),
    ("telegram bot token", r"\b\d{8,10}:[0-9A-Za-z_\-]{35}\b", 0, 0),
    ("slack webhook", r"https://hooks\.slack\.com/services/T[\w]+/B[\w]+/[\w]+", re.I, 0),
    (
        "azure storage key",
        r"(?i)\b(?:account|shared[_ ]?access)[_ ]?key\s*=\s*([A-Za-z0-9+/=]{20,})",
        0,
        1,
    ),
    ("sas signature", r"(?i)[?&]sig=([A-Za-z0-9%+/=]{16,})", 0, 1),
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}", 0, 0),
    ("bearer token", r"(?i)\bbearer\s+([A-Za-z0-9._~+/\-]{8,}=*)", 0, 1),
    ("token", r"(?i)\btoken\s+((?=\S*\d)[A-Za-z0-9._~+/\-]{16,}=*)", 0, 1),
    ("basic auth", r"(?i)\bbasic\s+([A-Za-z0-9+/]{8,}=*)", 0, 1),
    # through the last "@" before the host: a password may itself hold "@"
    # (a user name may be empty: redis://:password@host)
    ("url userinfo", r"(?<=://)([^/\s:@]*:[^/\s]*)@(?=[^/\s@:]+)", 0, 1),
    # the name=value pairs of the header, not the rest of its line
    (
        "cookie header",
        r"(?im)\b(?:set-)?cookie\s*[:=]\s*"
        r"([^\s;=,]+=[^;\r\n]*?(?:;[ \t]*[^\s;=,]+=[^;\r\n]*?)*)(?=;|[\r\n]|$)",
        0,
        1,
    ),
)

_CONTEXT_RULES: tuple[tuple[str, str, Callable[[re.Match[str]], str]], ...] = (
    (
        # ?key=..., &access_token=..., ;jsessionid=...
        "query parameter",
        r"(?<=[?&;])([A-Za-z][\w.\-\[\]%]{0,63})=(?!\[REDACTED\])([^&#\s\"'<>\\]{3,})",
        _masking(2, when=_query_name),
    ),
    (
        # not a path ("/etc/passwd: ..."), and a value is not a URI ("passwd: see
        # cold://chains/..." names no secret)
        "key=value secret",
        rf"(?i)(?<![/\\.\w])((?:[a-z][\w.\-]{{0,63}}?)?{_FRAGMENTS}[\w.\-]{{0,63}}?)"
        rf"(\\*[\"']?)\s*([=:])\s*\\*[\"']?{_NO_SCHEME}"
        r"((?:(?:bearer|basic|token)\s+)?[^\s\"'&,;}<>\\]{3,})",
        _masking(4, when=_pair_name),
    ),
    (
        # Invalid API key 'X', token "X" expired, password: `X`
        "quoted after a secret's name",
        rf"(?i)(?<!unexpected\s)(?<!unknown\s)\b(?:{_NOUNS})s?\b(?:\s+(?:provided|given|supplied|received|used|sent|value|"
        r"header|string|for\s+[^\s'\"]{1,64}))?(?:\s*[:=]\s*|\s+(?:is|was)\s+|\s+)"
        r"(?:'([^'\s][^'\n]{1,511}?)'|\"([^\"\s][^\"\n]{1,511}?)\"|`([^`\s][^`\n]{1,511}?)`|"
        "\u2018([^\u2019\\n]{1,512}?)\u2019|\u201c([^\u201d\\n]{1,512}?)\u201d|"
        "\u00ab([^\u00bb\\n]{1,512}?)\u00bb)",
        _masking(1, 2, 3, 4, 5, 6, when=lambda m: MASK not in m.group(0)),
    ),
    (
        # Incorrect API key provided: sk-abc***
        "secret provided",
        rf"(?i)\b(?:{_NOUNS})s?\s+(?:provided|given|supplied|received|used|sent)\s*[:=]\s*"
        rf"{_NO_SCHEME}([^\s\"'`,;]{{3,}}[^\s\"'`,;.])",
        _masking(1, when=lambda m: _word_value(m.group(1)) not in _NOT_SECRETS),
    ),
    (
        # my password is X, the api key for prod was X, pin set to X
        "secret phrase",
        r"(?i)\b(?:(my|our|your|the|new|his|her|their|this)\s+(?:[\w-]+\s+)?)?"
        rf"({_PHRASE_NOUNS})(?:\s+for\s+[^\s,;]{{1,64}})?\s+"
        r"(?:is|was|are|=|:|(?:has\s+been\s+)?(?:set|changed|reset)\s+to)\s+"
        r"(?:now\s+|still\s+)?([\"'`]?)([^\s\"'`]{3,128})",
        _masking(4, when=_phrase_value),
    ),
)


# "pwd": "x" and {'auth': 'x'}, also escaped inside a JSON string: {\"auth\": \"x\"}.
# The value is matched in a lookahead, not consumed: a member whose name is not
# sensitive ("body": "{\"password\": ...}") may hold sensitive ones.
_MEMBER = re.compile(
    r"(\\*)([\"'])([^\"'\\\n]{1,64})\1\2\s*:\s*\1\2"
    r"(?=(?!\[REDACTED\])((?:\\.|(?!\1\2)[^\\\n]){1,4096}?)\1\2)"
)


def _members(text: str) -> str:
    """``text`` with the values of its sensitive JSON members masked."""
    out: list[str] = []
    last = 0
    for match in _MEMBER.finditer(text):
        start, end = match.span(4)
        if start >= last and key_strength(match.group(3)) > 0:
            out += [text[last:start], MASK]
            last = end
    return "".join([*out, text[last:]]) if out else text


def _shape_mask(shape: Shape) -> Any:
    def when(match: re.Match[str]) -> bool:
        value = next((match.group(g) for g in shape.groups if match.group(g) is not None), "")
        if MASK in value:
            return False
        return shape.keep is None or shape.keep(value, match.string[: match.start()])

    return _masking(*shape.groups, when=when)


def _compile() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for name, source, flags, group in _SIMPLE_RULES:
        pattern = re.compile(source, flags)
        rules.append(Rule(name, pattern, group, _least_width(pattern)))
    rules.append(Rule("json member", _MEMBER, _members, _least_width(_MEMBER)))
    # before "name: value", which would mask a block's first word and leave the rest
    least = _least_width(KEY_OVER_VALUE)
    rules.append(Rule("value under its key", KEY_OVER_VALUE, _values_under, least, ("\n",)))
    for shape in SHAPES:  # before "name=value": a quoted value is masked whole
        pattern = re.compile(shape.pattern)
        least = _least_width(pattern)
        rules.append(Rule(shape.name, pattern, _shape_mask(shape), least, shape.needs))
    for name, source, replace in _CONTEXT_RULES:
        pattern = re.compile(source)
        rules.append(Rule(name, pattern, replace, _least_width(pattern)))
    return tuple(rules)


def _strong_name(name: str) -> bool:
    # as for "name: value": a weak word ("auth:", "session:") heads prose and plain
    # mappings more often than a secret
    return key_strength(name) == 2


def _values_under(text: str) -> str:
    return values_under_keys(text, _strong_name, MASK)


SCANS: frozenset[Callable[[str], str]] = frozenset({_members, _values_under})
RULES = _compile()
MAX_JSON_TEXT = 1_048_576
"""Longest text parsed as a JSON document to be redacted as a structure."""


def apply_rule(rule: Rule, text: str) -> str:
    if isinstance(rule.mask, int):
        if rule.mask == 0:
            return rule.pattern.sub(MASK, text)
        return rule.pattern.sub(functools.partial(_mask_group, group=rule.mask), text)
    if rule.mask in SCANS:
        return rule.mask(text)
    return rule.pattern.sub(rule.mask, text)  # type: ignore[arg-type]


def redact_text(text: str) -> str:
    document = _json_document(text)
    if document is not None:
        return document
    lowered = text.lower()  # masks add none of the needles: the original's will do
    for rule in RULES:
        if len(text) >= rule.least and (not rule.needs or any(n in lowered for n in rule.needs)):
            text = apply_rule(rule, text)
    return text


def line_redactor() -> LineRedactor:
    """A redactor for a text read one line at a time (an upstream's stderr): each line as
    :func:`redact_text` redacts it, with what spans lines remembered from the lines
    before (:mod:`sidecar.trust.secretblocks`)."""
    return LineRedactor(redact_text, _strong_name, MASK)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of the known ``secrets`` masked wherever it appears (longest
    first; see :func:`sidecar.trust.secretshapes.url_secrets`), then redacted."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, MASK)
    return redact_text(text)


def _json_document(text: str) -> str | None:
    """``text`` redacted as a structure when it is a whole JSON object or array holding a
    string (escaped JSON inside a string is parsed once per level), else ``None``."""
    stripped = text.strip()
    if stripped[:1] not in ("{", "[") or '"' not in stripped or len(stripped) > MAX_JSON_TEXT:
        return None
    try:
        document = json.loads(stripped)
        if not isinstance(document, dict | list):
            return None
        cleaned = redact(document)
    except (ValueError, RecursionError):
        return None
    if cleaned == document:
        return text
    return json.dumps(cleaned, ensure_ascii=False)


# ---- structures ------------------------------------------------------------------------
_PAIR_NAMES = ("name", "key", "header", "field", "param", "parameter", "variable", "var")
_PAIR_VALUES = ("value", "values", "val", "content", "data")


def _maskable(item: Any) -> bool:
    return item not in (None, "", [], {}) and not isinstance(item, bool)


def _masked(item: Any) -> Any:
    return MASK if not isinstance(item, Mapping | list | tuple) else redact_all(item)


def _pair_name_of(value: Mapping[Any, Any]) -> bool:
    """Whether ``value`` is a name/value pair whose name is sensitive."""
    if not any(k in value for k in _PAIR_VALUES):
        return False
    return any(isinstance(value.get(k), str) and is_sensitive_key(value[k]) for k in _PAIR_NAMES)


def redact(value: Any) -> Any:
    """A copy of ``value`` (JSON-like) with secrets masked, by key name and by pattern."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        pair = _pair_name_of(value)
        out: dict[str, Any] = {}
        for key, item in value.items():
            skey = str(key)
            sensitive = is_sensitive_key(skey) or (pair and skey in _PAIR_VALUES)
            masked = _masked(item) if sensitive and _maskable(item) else redact(item)
            out[_unique(out, _safe_key(skey))] = masked
        return out
    if isinstance(value, list | tuple):
        if (
            len(value) == 2
            and isinstance(value[0], str)
            and is_sensitive_key(value[0])
            and _maskable(value[1])
        ):
            # a header as a [name, value] pair
            return [redact_text(value[0]), _masked(value[1])]
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
    # keys repeat (every span of a trace has the same few): every rule per key and per
    # occurrence was most of the cost of taking in a trace
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


_NAME_LIKE = re.compile(r"[A-Z]?[a-z]+(?:[-_][A-Z]?[a-z]+){2,}")


def looks_like_secret(value: str) -> str | None:
    """Why ``value`` looks like a secret (a known token format, or a long random string
    with no scheme or path), else ``None``."""
    for rule in RULES:
        if rule.name == "key=value secret":
            # "secret:prod/db" in an ARN names a secret; "token=abc123" carries one
            if any(m.group(3) == "=" and _pair_name(m) for m in rule.pattern.finditer(value)):
                return rule.name
            continue
        if isinstance(rule.mask, int):
            if rule.pattern.search(value):
                return rule.name
        elif apply_rule(rule, value) != value:
            return rule.name
    # no scheme ("vault://", "env:", "arn:"): a long random-looking string is a value
    schemeless = "://" not in value and not re.match(r"[A-Za-z][A-Za-z0-9+.\-]*:", value)
    # capitalised words between separators are a name ("Ocp-Apim-Subscription-Key")
    named = _NAME_LIKE.fullmatch(value) is not None
    if schemeless and not named and len(value) >= 24 and " " not in value:
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
