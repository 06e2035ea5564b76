"""Tool-chain sidecar: failure memory for agent tool retrieval.

The library that the ``sidecar`` CLI (and the HTTP and MCP shells) call.  Importing it
is cheap: Chroma and the embedding model load on first use.
"""

from sidecar.app import AddToolsResult, Sidecar
from sidecar.catalog import load_tool_file, load_tools, parse_tool
from sidecar.classify import Classification, classify
from sidecar.constraints import ConstraintMatcher
from sidecar.errors import (
    ConfigError,
    EmptyArchive,
    InvalidInput,
    NotFound,
    ReportRejected,
    SecretValueError,
    SidecarError,
    StorageError,
    ToolFormatError,
)
from sidecar.model import (
    ArchivedConstraint,
    ChainReport,
    CheckResult,
    Collision,
    Condition,
    ConstraintSpec,
    CredentialRef,
    Failure,
    IntakeResult,
    LookupHit,
    LookupResult,
    Tool,
    Withheld,
)
from sidecar.reports import parse_report
from sidecar.settings import Settings

__version__ = "0.1.0"

__all__ = [
    "AddToolsResult",
    "ArchivedConstraint",
    "ChainReport",
    "CheckResult",
    "Classification",
    "Collision",
    "Condition",
    "ConfigError",
    "ConstraintMatcher",
    "ConstraintSpec",
    "CredentialRef",
    "EmptyArchive",
    "Failure",
    "IntakeResult",
    "InvalidInput",
    "LookupHit",
    "LookupResult",
    "NotFound",
    "ReportRejected",
    "SecretValueError",
    "Settings",
    "Sidecar",
    "SidecarError",
    "StorageError",
    "Tool",
    "ToolFormatError",
    "Withheld",
    "__version__",
    "classify",
    "load_tool_file",
    "load_tools",
    "parse_report",
    "parse_tool",
]
