"""Secrets in the shapes deployments write them: connection strings, command lines, AWS
secret keys after their label and login failures.  :mod:`sidecar.trust.redact` compiles
:data:`SHAPES` with its other text rules.

- **Connection strings** of any scheme, with or without a user name (``redis://:pw@h``,
  ``amqp://u:pw@h``, ``mongodb+srv://u:pw@cluster``; the password may hold ``/``), and
  libpq / ODBC ``key=value`` strings whose value is quoted (``password='a b'``,
  ``Password={a;b}``; unquoted values are the ``name=value`` rule's).
- **Command-line flags** that take a password: ``curl -u user:pw`` (``--user``,
  ``--proxy-user``), ``sshpass -p pw``, ``mysql -ppw`` (the attached form: ``-p pw`` asks
  for one), ``--password pw`` and other ``--...-password`` / ``--token`` / ``--api-key``
  / ``--secret`` flags followed by their value, ``redis-cli -a pw``, ``openssl ... -passin
  pass:pw``, ``smbclient -U user%pw``.  A ``user:group`` of digits (``docker -u
  1000:1000``) is no password.
- **Registry logins**: ``docker login -u user -p pw`` (podman, helm, oras and others).
- **AWS secret access keys** after their label, its words apart or not (``secret key:
  X``, ``aws_secret_access_key = X``, ``SecretAccessKey: X``, aws configure's ``AWS
  Secret Access Key [None]: X``): 40 base64 characters.
- **Login failures** that quote a password unquoted: "password X is invalid", "login
  failed, password X is incorrect", "login failed, password X", "invalid password X".
  The value must look like a secret (a digit, a symbol or mixed case), or, after a
  password's own noun, be no word of error prose ("password confirmation is invalid"
  names no password; "login failed, password reset needed" none either).

:func:`url_secrets` gives the secret parts of one known connection string, as they can
appear in a message about it (a parser's error quotes the piece it choked on); the
sidecar masks them in every error it prints about its database.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

WHY_WORDS = frozenset(
    (
        "required", "invalid", "missing", "expired", "incorrect", "wrong", "empty", "null",
        "none", "nil", "undefined", "unset", "set", "present", "absent", "valid", "revoked",
        "disabled", "enabled", "correct", "unknown", "blank", "optional", "mandatory",
        "needed", "too", "not", "being", "already", "no", "weak", "short", "long",
        "malformed", "unsupported", "unavailable", "locked", "inactive", "active", "ok",
        "good", "bad", "reset", "changed", "updated", "accepted", "rejected", "denied",
        "deprecated", "different", "same", "hidden", "stored", "saved", "encrypted",
        "hashed", "only", "must", "should", "will", "can", "cannot", "has", "have", "a",
        "an", "the", "of", "in", "on", "for", "to", "and", "or", "this", "that", "it",
        "now", "false", "true", "provided", "given", "supplied", "received", "used", "sent",
        "yes",
    )
)  # fmt: skip
"""Words that follow a secret's name in error messages ("password is required",
"token: expired") and are no secret."""
_DESCRIBING = frozenset(
    (
        "confirmation", "field", "hash", "policy", "length", "format", "strength", "entry",
        "entered", "input", "value", "parameter", "attempt", "attempts", "change", "reset",
        "combination", "complexity", "rules", "requirements", "characters", "history",
        "mismatch", "match", "you", "your", "which", "supplied", "verification", "check",
        "signature", "type", "scope", "audience", "issuer", "claims", "header", "prefix",
    )
)  # fmt: skip
"""Words that describe a password rather than quote one ("password hash is invalid")."""
_AFTER_A_LOGIN = frozenset(
    (
        "authentication", "auth", "login", "logon", "prompt", "protected", "based", "file",
        "manager", "expiry", "expiration", "age", "needed", "please", "again", "retry",
    )
)  # fmt: skip
"""Words that follow "password" in a login failure's prose without being one ("login
failed: password authentication failed", "login failed, password reset needed")."""


def word_of(text: str) -> str:
    return text.strip(".,;:!?)(").lower()


def secret_shaped(value: str) -> bool:
    """Whether ``value`` has what a password or key has and a word rarely does: a digit,
    a symbol, or capitals after its first letter mixed with small letters."""
    core = value.strip(".,;:!?)(")
    return (
        any(c.isdigit() for c in core)
        or any(not c.isalnum() for c in core)
        or (any(c.isupper() for c in core[1:]) and any(c.islower() for c in core))
    )


def _a_password(value: str, _before: str = "") -> bool:
    """After a password's noun ("password X is invalid"): any word but error prose."""
    word = word_of(value)
    return word not in WHY_WORDS and word not in _DESCRIBING


def _a_login_password(value: str, _before: str = "") -> bool:
    """After "login failed, password": any word but error prose about logging in."""
    return _a_password(value) and word_of(value) not in _AFTER_A_LOGIN


def _secret_value(value: str, _before: str = "") -> bool:
    return word_of(value) not in WHY_WORDS and secret_shaped(value)


def _not_ids(value: str, _before: str = "") -> bool:
    """``docker -u 1000:1000`` is a user and a group, not a password."""
    return not value.isdigit()


_NAME_BEFORE = re.compile(r"(?<![/\\.\w])[A-Za-z][\w.\-]{0,63}$")
_SECRET_NAME = re.compile(r"(?i)pass|pwd|secret|token|auth|key|credential")


def _secret_name(_value: str, before: str) -> bool:
    """Whether the name before ``=`` names a secret (``password``, ``PGPASSWORD``,
    ``client_secret``, ``AccountKey``)."""
    name = _NAME_BEFORE.search(before[-64:].rstrip(" \t"))
    return name is not None and _SECRET_NAME.search(name.group(0)) is not None


@dataclass(frozen=True)
class Shape:
    name: str
    pattern: str
    groups: tuple[int, ...]
    """The groups that may hold the secret: the first that matched is masked."""
    keep: Callable[[str, str], bool] | None = None
    """Whether that group's text is a secret, given it and the text before the match
    (``None``: always)."""
    needs: tuple[str, ...] = ()
    """Lower-case texts of which every match holds one: a text holding none is skipped
    without running the pattern (most texts are ordinary)."""


_QUOTED = r"'(?:\\.|[^'\\\n]){1,512}'|\"(?:\\.|[^\"\\\n]){1,512}\"|\{[^}\n]{1,512}\}"
# a value: quoted (masked inside the quotes) or bare
_VALUE = r"'([^'\n]{1,256})'|\"([^\"\n]{1,256})\"|([^\s'\"]{1,256})"
_PASSWORD_NOUNS = r"password|passphrase|passcode|passwd|pwd"
_NOUN = rf"(?:{_PASSWORD_NOUNS}|pin|api[\s_-]?key|secret(?:\s+key)?|token)"
_FAILED = (
    r"(?:invalid|incorrect|wrong|expired|rejected|revoked|denied|unknown|bad|"
    r"not\s+(?:valid|accepted|correct|recognized|recognised))"
)
_NOT_A_VALUE = r"(?!(?:is|was|are|for|of|has|have|must|should|and|or)\b)"
_IS_FAILED = rf"(?:is|was|are)\s+(?:now\s+|still\s+)?{_FAILED}\b"
_FLAG_NAMES = r"[\w-]*(?:password|passwd|passphrase|token|secret|api-?key)"

SHAPES: tuple[Shape, ...] = (
    Shape(
        # the userinfo rule of sidecar.trust.redact takes passwords without "/": this one takes
        # the rest (a port is digits before "/": "http://h:8080/@x" holds no password)
        "url userinfo with a slash",
        r"(?<=://)([^/\s:@]*:(?!\d{1,5}/)[^\s@/]*/[^\s@]*)@(?=[^/\s@:]+)",
        (1,),
        needs=("://",),
    ),
    Shape(
        # libpq: password='a b\'c'; ODBC: Password={a;b}; a quoted value whole (the
        # match starts at "=": the name before it is read by _secret_name)
        "quoted name=value secret",
        rf"(?<=[\w.\-])[ \t]{{0,2}}=[ \t]*({_QUOTED})",
        (1,),
        _secret_name,
        ("=",),
    ),
    Shape(
        "curl -u user:password",
        r"(?<![\w-])(?:-u\s*|--(?:proxy-)?user(?:\s+|=))"
        r"(?:'[^\s:']{1,128}:([^'\n]{1,256})'|\"[^\s:\"]{1,128}:([^\"\n]{1,256})\"|"
        r"[^\s:'\"]{1,128}:([^\s'\"]{1,256}))",
        (1, 2, 3),
        _not_ids,
        ("-u",),
    ),
    Shape(
        "sshpass -p password",
        rf"\bsshpass\b[^\n]{{0,64}}?\s-p\s*(?:{_VALUE})",
        (1, 2, 3),
        needs=("sshpass",),
    ),
    Shape(
        "mysql -ppassword",
        r"\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow|mariadb|"
        r"mariadb-dump)\b[^\n]{0,128}?\s-p"
        r"(?:'([^'\n]{1,256})'|\"([^\"\n]{1,256})\"|([^\s'\"]{1,256}))",
        (1, 2, 3),
        needs=("mysql", "mariadb"),
    ),
    Shape(
        "--password value",
        rf"(?i)(?<![\w-])--(?!no-){_FLAG_NAMES}\s+(?!-)(?:{_VALUE})",
        (1, 2, 3),
        lambda v, _b: word_of(v) not in WHY_WORDS,
        ("--",),
    ),
    Shape(
        "redis-cli -a password",
        rf"\bredis-cli\b[^\n]{{0,128}}?\s-a\s+(?:{_VALUE})",
        (1, 2, 3),
        needs=("redis-cli",),
    ),
    Shape(
        "openssl pass:password",
        r"(?<![\w-])-pass(?:in|out)?\s+pass:(\S{1,256})",
        (1,),
        needs=("pass:",),
    ),
    Shape(
        "smbclient -U user%password",
        r"(?<![\w-])-U\s*[^\s%'\"]{1,128}%(\S{1,256})",
        (1,),
        needs=("%",),
    ),
    Shape(
        # login failed, password X is invalid
        "password named before its failure",
        rf"(?i)\b(?:{_PASSWORD_NOUNS})\s+{_NOT_A_VALUE}([^\s\"'`,;]{{3,128}})\s+{_IS_FAILED}",
        (1,),
        _a_password,
        ("pass", "pwd"),
    ),
    Shape(
        # login failed, password X (nothing after it says it failed: the login did)
        "password after a failed login",
        rf"(?i)\b(?:log(?:-?in|-?on)|sign[\s-]?in|auth(?:entication)?)\s+(?:failed|refused|"
        rf"rejected|denied)\b[^\n]{{0,80}}?\b(?:{_PASSWORD_NOUNS})\s+{_NOT_A_VALUE}"
        r"([^\s\"'`,;]{2,127}[^\s\"'`,;.:)])",
        (1,),
        _a_login_password,
        ("failed", "refused", "rejected", "denied"),
    ),
    Shape(
        "registry login -p password",
        r"\b(?:docker|podman|buildah|skopeo|helm|oras|nerdctl|crane)\b[^\n]{0,64}?\blogin\b"
        r"[^\n]{0,128}?\s-p(?:\s+|=)?(?:'([^'\n]{1,256})'|\"([^\"\n]{1,256})\"|"
        r"([^\s'\"-][^\s'\"]{0,255}))",
        (1, 2, 3),
        needs=("login",),
    ),
    Shape(
        # secret key: X, AWS Secret Access Key [None]: X (aws configure's prompt); the
        # label's words may be apart, so the name=value rule does not see one name.
        # Only the 40 base64 characters of an AWS secret: after a spaced label, anything
        # shorter is as likely prose ("secret key: not configured")
        "aws secret access key after its label",
        r"(?i)(?<![a-z0-9])(?:aws[\s_-]?)?secret[\s_-]?(?:access[\s_-]?)?key"
        r"(?:[ \t]*\[[^\]\n]{0,64}\])?[ \t]*[:=]\s*[\"']?([A-Za-z0-9/+]{40})(?![\w/+=])",
        (1,),
        needs=("secret",),
    ),
    Shape(
        "secret named before its failure",
        rf"(?i)\b(?:pin|api[\s_-]?key|secret(?:\s+key)?|token)\s+{_NOT_A_VALUE}"
        rf"([^\s\"'`,;]{{3,128}})\s+{_IS_FAILED}",
        (1,),
        _secret_value,
        ("pin", "api", "secret", "token"),
    ),
    Shape(
        # invalid password X
        "secret named after its failure",
        rf"(?i)\b{_FAILED}\s+{_NOUN}\s*[:=]?\s+"
        r"(?!(?:for|of|is|was|provided|given|supplied|entered|used|sent|and|or|to|in|on|at|"
        r"from|with|please|try|again|when|while)\b)([^\s\"'`,;]{2,127}[^\s\"'`,;.:])",
        (1,),
        _secret_value,
        ("pass", "pwd", "pin", "api", "secret", "token"),
    ),
)


def _userinfo_password(url: str) -> str | None:
    rest = url.split("://", 1)[1] if "://" in url else ""
    if "@" not in rest:
        return None
    userinfo = rest.rsplit("@", 1)[0]  # a password may hold "@" and "/"
    return userinfo.split(":", 1)[1] if ":" in userinfo else None


_URL_PASSWORD = re.compile(r"(?i)[?&]password=([^&#]*)")
"""In a URL's query the value runs to the next parameter (a space in it is a typo)."""
_KEY_PASSWORD = re.compile(
    r"(?i)(?:^|\s)password\s*=\s*('(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"|\S*)"
)
_SPLITS = re.compile(r"[/@:?#\s&;=]+")
_LEAST_PIECE = 4
"""Pieces shorter than this are not masked on their own: they would mask words."""


def url_secrets(url: str | None) -> tuple[str, ...]:
    """The secret parts of connection string ``url`` as a message may quote them,
    longest first: the password of its userinfo (through the last ``@``, so that one
    holding ``@`` or ``/`` is whole), of a ``password=`` parameter (URL query or libpq
    ``key=value``, quoted or not), raw and percent-decoded, and the pieces of each that
    a parser could split off (at ``/ @ : ? # & ; =`` and spaces) of 4 characters or
    more."""
    if not url:
        return ()
    found: set[str] = set()
    candidates = [_userinfo_password(url)]
    params = _URL_PASSWORD if "://" in url else _KEY_PASSWORD
    candidates += [m.group(1).strip("'\"") for m in params.finditer(url)]
    for value in candidates:
        if not value:
            continue
        for form in (value, unquote(value)):
            found.add(form)
            found.update(p for p in _SPLITS.split(form) if len(p) >= _LEAST_PIECE)
    return tuple(sorted((s for s in found if s), key=len, reverse=True))
