"""Errors raised by the sidecar library.

    SidecarError                   root of everything :mod:`sidecar` raises
    ├── InvalidInput               a request, report or tool definition is malformed
    │   ├── ReportRejected         a chain report fails the decision boundary (step 2)
    │   ├── ToolFormatError        a tool definition in no known format, or invalid
    │   └── SecretValueError       a credential field holds what looks like a secret
    ├── ConfigError                a setting is invalid
    ├── NotFound                   an unknown tool, chain or pointer
    ├── EmptyArchive               the archive holds no chain (no digest is defined)
    └── StorageError               a store failed (wraps ToolIndexError / ColdStoreError)

``ReportRejected`` is also a ``ValueError`` so that callers porting the seed, whose
``archive_chain`` raised ``ValueError``, keep working.
"""

from __future__ import annotations


class SidecarError(Exception):
    """Root of every error raised by :mod:`sidecar`."""

    code = "sidecar_error"


class InvalidInput(SidecarError, ValueError):
    code = "invalid_input"


class ReportRejected(InvalidInput):
    code = "report_rejected"


class ToolFormatError(InvalidInput):
    code = "tool_format"

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(f"{source}: {message}" if source else message)
        self.source = source


class SecretValueError(InvalidInput):
    code = "secret_value"

    def __init__(self, where: str) -> None:
        super().__init__(
            f"{where} looks like a secret value; credentials are declared by reference "
            "only (a key id, vault path or OAuth client id), never by value"
        )
        self.where = where


class ConfigError(SidecarError):
    code = "config"


class NotFound(SidecarError):
    code = "not_found"


class EmptyArchive(SidecarError):
    code = "empty_archive"

    def __init__(self) -> None:
        super().__init__("Cannot build an empty abandoned chain archive.")


class StorageError(SidecarError):
    code = "storage"
