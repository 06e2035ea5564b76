"""Every error the sidecar raises, with how each shell shows it.

    SidecarError                    root; ``internal`` (500, exit 1)
    ├── InvalidInput                a request, report or tool definition is malformed (400, 2)
    │   ├── ReportRejected          a chain report fails the decision boundary
    │   ├── ToolFormatError         a tool definition in no known format, or invalid
    │   ├── SecretValueError        a credential field holds what looks like a secret
    │   └── UsageError              a command line that cannot be run (exit 2)
    ├── ConfigError                 a setting is invalid (500, exit 2)
    ├── NotFound                    an unknown tool, chain, pointer or home (404, 5)
    │   ├── HomeNotFound            no home where a command that creates none looked
    │   └── EmptyArchive            the archive holds no chain: no digest is defined
    ├── Busy                        a lock is held: another eviction, or a server owns
    │                               the home (409, 6)
    ├── StorageError                a store cannot serve the request (503, 7)
    │   ├── IndexUnavailable        the hot index (Chroma, or the embedding model)
    │   ├── ColdStoreUnavailable    the cold archive (unwritable, unreadable record)
    │   ├── StateUnavailable        the state database (read-only home, full disk,
    │   │   │                       PostgreSQL unreachable)
    │   │   ├── SchemaTooNew        the state was written by a newer sidecar
    │   │   └── SchemaPending       the state is not at this code's schema and this
    │   │                           process may not migrate it (``SIDECAR_MIGRATE=never``)
    │   ├── Degraded                writes refused until interrupted moves recover
    │   └── UnsafeStorage           a shared store that several processes cannot write
    │                               safely: an object store ignoring conditional
    │                               writes, a pooler that breaks locks (503, exit 14)
    ├── Forbidden                   the caller's role may not do this (403, 12)
    ├── RateLimited                 a source sent more reports, steps or tool ids in
    │   │                           no catalog than its rates allow (429, 13)
    │   └── BudgetExhausted         a source's evidence in the state reached its budget
    ├── AddressInUse                ``serve``: the port is taken (exit 8)
    ├── RemoteError                 talking to a running sidecar failed (502, 9)
    │   ├── Unreachable             no answer at ``--url``
    │   └── Unauthorized            the token was missing or wrong (401)
    ├── BodyTooLarge                a request body over the server's limit (413, exit 10)
    └── GatewayError                the MCP gateway failed (502, exit 11)
        ├── UpstreamSpecError       an upstream given as neither NAME=URL nor NAME=COMMAND
        │                           (also an ``InvalidInput``: 400, exit 2)
        └── GatewayUnavailable      the gateway cannot serve (503, exit 11)
            └── UpstreamUnavailable an upstream MCP server could not be reached

Each class declares its ``code`` (stable, machine-readable), ``status`` (HTTP) and
``exit_code`` (CLI).  The HTTP error envelope, the CLI's exit codes, the MCP tool
errors and the client's mapping of an HTTP error back to a class are all derived from
these attributes (:func:`error_table`, :func:`from_code`): there is no other table.

``ReportRejected`` and ``InvalidInput`` are also ``ValueError`` so that callers porting
the design note's reference code, whose ``archive_chain`` raised ``ValueError``, keep
working.
"""

from __future__ import annotations

from typing import Any, ClassVar

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INVALID = 2
EXIT_BLOCKED = 3
"""``check``: the plan or call is blocked."""
EXIT_REJECTED = 4
"""``report``: at least one line was rejected."""
EXIT_WARNED = EXIT_REJECTED
"""``check`` of a call: warned.  The same code as :data:`EXIT_REJECTED` on purpose: no
command can end both ways (``report`` never warns, ``check`` rejects nothing), and 4 is
what the docs and ``check``'s help promise for a warning."""
EXIT_NOT_FOUND = 5
EXIT_BUSY = 6
EXIT_UNAVAILABLE = 7
EXIT_ADDRESS_IN_USE = 8
EXIT_REMOTE = 9
EXIT_TOO_LARGE = 10
"""A request was over the server's body limit (``sidecar serve --max-body``)."""
EXIT_FORBIDDEN = 12
EXIT_RATE_LIMITED = 13
EXIT_UNSAFE = 14
"""A shared store that cannot be written safely by several processes, refused at start."""
EXIT_GATEWAY = 11
"""``gateway``: it cannot serve (an upstream unreachable or unusable at start)."""


class SidecarError(Exception):
    """Root of every error raised by :mod:`sidecar`."""

    code: ClassVar[str] = "internal"
    status: ClassVar[int] = 500
    exit_code: ClassVar[int] = EXIT_INTERNAL


class InvalidInput(SidecarError, ValueError):
    code = "invalid_input"
    status = 400
    exit_code = EXIT_INVALID


class ReportRejected(InvalidInput):
    code = "report_rejected"


class ToolFormatError(InvalidInput):
    code = "tool_format"
    source: str | None = None

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(f"{source}: {message}" if source else message)
        self.source = source


class SecretValueError(InvalidInput):
    code = "secret_value"
    where = ""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"{where} looks like a secret value; credentials are declared by reference "
            "only (a key id, vault path or OAuth client id), never by value"
        )
        self.where = where


class UsageError(InvalidInput):
    code = "usage"


class ConfigError(SidecarError):
    code = "config"
    exit_code = EXIT_INVALID


class NotFound(SidecarError):
    code = "not_found"
    status = 404
    exit_code = EXIT_NOT_FOUND


HOME_CREATORS = "`sidecar tools add`, `report`, `serve`, `mcp`, `gateway` and `demo`"
"""The commands that make a home where there is none: they bring what a home holds
(tools, reports) or serve one.  Every other command needs an existing home."""


class HomeNotFound(NotFound):
    """A read, or a write that acts on what a home holds (an eviction, a restore, a
    lift ...), was pointed at a folder that holds no sidecar home: making an empty one
    there would only hide a mistyped path.  Keeps :class:`NotFound`'s code."""

    path = ""

    def __init__(self, path: object) -> None:
        super().__init__(
            f"no sidecar home at {path}: nothing was added or reported there (check --home "
            f"or SIDECAR_HOME; {HOME_CREATORS} create a home, no other command does)"
        )
        self.path = str(path)


class EmptyArchive(NotFound):
    code = "empty_archive"

    def __init__(self, message: str = "Cannot build an empty abandoned chain archive.") -> None:
        super().__init__(message)


class Busy(SidecarError):
    code = "busy"
    status = 409
    exit_code = EXIT_BUSY
    holder = ""

    def __init__(self, message: str, holder: str = "") -> None:
        super().__init__(message)
        self.holder = holder


class StorageError(SidecarError):
    code = "storage_unavailable"
    status = 503
    exit_code = EXIT_UNAVAILABLE


class IndexUnavailable(StorageError):
    code = "index_unavailable"


class ColdStoreUnavailable(StorageError):
    code = "cold_store_unavailable"


class StateUnavailable(StorageError):
    code = "state_unavailable"


class SchemaTooNew(StateUnavailable):
    """The state database's schema version is newer than this code knows: a newer
    sidecar wrote it, and reading or writing it here could lose what that one added."""

    code = "schema_too_new"


class SchemaPending(StateUnavailable):
    """The state database's schema is not at this code's version, and this process was
    told not to migrate it (``SIDECAR_MIGRATE=never``): ``sidecar migrate`` does."""

    code = "schema_pending"


class Degraded(StorageError):
    code = "degraded"


class UnsafeStorage(StorageError):
    """Refused at start: a store that would lose or mix writes once several processes
    share it (an object store that does not honour put-if-absent, a connection pooler
    that hands one session's locks to another)."""

    code = "unsafe_storage"
    exit_code = EXIT_UNSAFE


class Forbidden(SidecarError):
    code = "forbidden"
    status = 403
    exit_code = EXIT_FORBIDDEN


class RateLimited(SidecarError):
    code = "rate_limited"
    status = 429
    exit_code = EXIT_RATE_LIMITED
    retry_after: float | None = 1.0
    """Seconds until the source may report again (``None``: waiting does not help)."""
    limit: str = "reports"
    """Which limit refused: ``reports``, ``steps``, ``new_tool_ids``, ``evidence_budget``."""

    def __init__(
        self, message: str, retry_after: float | None = 1.0, limit: str = "reports"
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.limit = limit


class BudgetExhausted(RateLimited):
    """A source has put its evidence budget's bytes into the state: waiting does not
    refill it (an operator forgets some of its evidence, or raises the budget)."""

    code = "budget_exhausted"
    retry_after = None
    limit = "evidence_budget"

    def __init__(self, message: str) -> None:
        super().__init__(message, None, "evidence_budget")


class AddressInUse(SidecarError):
    code = "address_in_use"
    exit_code = EXIT_ADDRESS_IN_USE


class RemoteError(SidecarError):
    code = "remote"
    status = 502
    exit_code = EXIT_REMOTE


class Unreachable(RemoteError):
    code = "unreachable"


class Unauthorized(RemoteError):
    code = "unauthorized"
    status = 401


class BodyTooLarge(SidecarError):
    """A request body over the server's limit (an OTLP trace body too, on the wire or
    once inflated).  The CLI splits its batches under the limit the server states, so
    this means one item alone is over it, or the server's limit changed under the
    command."""

    code = "body_too_large"
    status = 413
    exit_code = EXIT_TOO_LARGE


class GatewayError(SidecarError):
    code = "gateway"
    status = 502
    exit_code = EXIT_GATEWAY


class UpstreamSpecError(GatewayError, InvalidInput):
    code = "upstream_spec"
    status = 400
    exit_code = EXIT_INVALID


class GatewayUnavailable(GatewayError):
    code = "gateway_unavailable"
    status = 503


class UpstreamUnavailable(GatewayUnavailable):
    code = "upstream_unavailable"
    name = ""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"upstream {name} unavailable: {detail}")
        self.name = name


def _subclasses(cls: type[SidecarError]) -> list[type[SidecarError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out += _subclasses(sub)
    return out


def error_table() -> dict[str, type[SidecarError]]:
    """Every error class by its code (the one table the shells derive from)."""
    table: dict[str, type[SidecarError]] = {}
    for cls in _subclasses(SidecarError):
        if cls is not SidecarError and "code" not in vars(cls):
            continue  # keeps its parent's code: the same error to every shell
        if cls.code in table and table[cls.code] is not cls:
            raise AssertionError(f"error code {cls.code!r} is used twice")
        table[cls.code] = cls
    return table


def from_code(code: str, message: str, status: int = 500) -> SidecarError:
    """An error sent as ``{"code", "message"}`` back into its class (a client's view).

    Unknown codes (a newer server) become a :class:`RemoteError` carrying the code."""
    cls = error_table().get(code)
    if cls is None and status in (400, 422):
        cls = InvalidInput  # e.g. a request the server's schema refused
    if cls is None:
        return RemoteError(f"{message} (HTTP {status} {code})")
    # the message already has its final form: skip constructors that shape one
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    return err


def describe(exc: BaseException) -> dict[str, Any]:
    """The one error shape every shell sends: ``{"code", "message"}``."""
    code = exc.code if isinstance(exc, SidecarError) else "internal"
    return {"code": code, "message": str(exc)}
