"""Tool-chain sidecar: failure memory for agent tool retrieval.

The library that the ``sidecar`` CLI (and the HTTP and MCP shells) call.  Importing it
is cheap: names are resolved on first access (so ``sidecar --help`` loads neither
pyarrow nor numpy), and Chroma and the embedding model load on first use.
"""

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "AddToolsResult": "sidecar.tools",
    "ToolPage": "sidecar.tools.paging",
    "ArchiveStatus": "sidecar.results",
    "AuditRecord": "sidecar.results",
    "Busy": "sidecar.errors",
    "Degraded": "sidecar.errors",
    "Digest": "sidecar.results",
    "EvictionReport": "sidecar.eviction",
    "RemoteSidecar": "sidecar.shells.client",
    "RestoreResult": "sidecar.eviction",
    "ArchivedConstraint": "sidecar.model",
    "ChainReport": "sidecar.model",
    "CheckResult": "sidecar.model",
    "Classification": "sidecar.classify",
    "Collision": "sidecar.model",
    "Condition": "sidecar.model",
    "ConfigError": "sidecar.errors",
    "ConstraintMatcher": "sidecar.rules.matcher",
    "ConstraintSpec": "sidecar.model",
    "CredentialRef": "sidecar.model",
    "EmptyArchive": "sidecar.errors",
    "Failure": "sidecar.model",
    "IntakeResult": "sidecar.model",
    "InvalidInput": "sidecar.errors",
    "LookupHit": "sidecar.model",
    "LookupResult": "sidecar.model",
    "NotFound": "sidecar.errors",
    "ReportRejected": "sidecar.errors",
    "SecretValueError": "sidecar.errors",
    "Settings": "sidecar.settings",
    "Sidecar": "sidecar.core",
    "SidecarError": "sidecar.errors",
    "StorageError": "sidecar.errors",
    "ToolDecision": "sidecar.eviction",
    "Tool": "sidecar.model",
    "ToolFormatError": "sidecar.errors",
    "Withheld": "sidecar.model",
    "classify": "sidecar.classify",
    "load_tool_file": "sidecar.tools.catalog",
    "load_tools": "sidecar.tools.catalog",
    "parse_report": "sidecar.intake.parse",
    "parse_tool": "sidecar.tools.catalog",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sidecar' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
