"""The active tools: definitions in (:mod:`.catalog`), their records in the state and
vectors in the hot index (:mod:`.records`), and the tools as a whole: adding, syncing a
catalog source, listing (:mod:`.active`)."""

from sidecar.tools.active import REGISTRY_MIGRATED, Tools
from sidecar.tools.catalog import load_tool_file, load_tools, parse_tool
from sidecar.tools.records import AddToolsResult, Fields, SyncResult, ToolRecords

__all__ = [
    "REGISTRY_MIGRATED",
    "AddToolsResult",
    "Fields",
    "SyncResult",
    "ToolRecords",
    "Tools",
    "load_tool_file",
    "load_tools",
    "parse_tool",
]
