"""Tool definitions in, :class:`~sidecar.model.Tool` out.

Accepted shapes, detected per item:

- MCP ``Tool`` objects (``name``, ``description``, ``inputSchema``), a ``tools/list``
  result (``{"tools": [...]}``) or the whole JSON-RPC response around it;
- OpenAI function tools: chat-completions ``{"type": "function", "function": {...}}``
  and the flattened ``{"type": "function", "name": ..., "parameters": ...}``
  (also without ``type``, as many catalogs store them);
- the sidecar's own lines: ``tool_id``, ``tool_type``, ``description``,
  ``input_schema``, ``credentials``, ``pinned``.

A file holds JSON (one object or an array) or JSON lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from sidecar.errors import InvalidInput, SecretValueError, ToolFormatError
from sidecar.model import CredentialRef, Tool
from sidecar.trust.redact import looks_like_secret
from sidecar.validate import TOOL_TYPE_PATTERN, check_json_value, check_tool_id

MAX_DESCRIPTION = 8_192
MAX_SCHEMA_BYTES = 65_536
_CREDENTIAL_KEYS = frozenset({"ref", "scopes", "provider", "revocation_endpoint"})
_SIDECAR_KEYS = frozenset(
    {"tool_id", "tool_type", "description", "input_schema", "credentials", "pinned"}
)


def detect_format(item: Mapping[str, Any]) -> str:
    if "tool_id" in item:
        return "sidecar"
    if item.get("type") == "function" and isinstance(item.get("function"), Mapping):
        return "openai-chat"
    if "inputSchema" in item and "name" in item:
        return "mcp"
    if "name" in item and ("parameters" in item or item.get("type") == "function"):
        return "openai"
    if "name" in item and "description" in item:
        return "mcp"
    raise ToolFormatError(
        "not a tool definition: expected an MCP Tool (name, inputSchema), an OpenAI "
        "function tool (type=function), or a sidecar line (tool_id)"
    )


def expand(document: Any) -> Iterator[Mapping[str, Any]]:
    """The individual tool objects inside a decoded JSON document."""
    if hasattr(document, "model_dump"):  # an mcp.types.Tool or ListToolsResult
        document = document.model_dump(by_alias=True, exclude_none=True)
    if isinstance(document, list):
        for item in document:
            yield from expand(item)
        return
    if not isinstance(document, Mapping):
        raise ToolFormatError(f"expected a JSON object or array, got {type(document).__name__}")
    if "jsonrpc" in document and isinstance(document.get("result"), Mapping):
        yield from expand(document["result"])
        return
    if isinstance(document.get("tools"), list) and "name" not in document:
        yield from expand(document["tools"])
        return
    yield document


class _Fields(NamedTuple):
    """A tool's fields as its format gives them, not checked yet."""

    tool_id: Any
    description: Any
    schema: Any
    tool_type: Any
    credentials: tuple[CredentialRef, ...]
    pinned: bool


def parse_tool(item: Any) -> Tool:
    if hasattr(item, "model_dump"):
        item = item.model_dump(by_alias=True, exclude_none=True)
    if not isinstance(item, Mapping):
        raise ToolFormatError(f"a tool must be an object, got {type(item).__name__}")
    fmt = detect_format(item)
    raw = _sidecar_fields(item) if fmt == "sidecar" else _foreign_fields(item, fmt)
    try:
        tool_id = check_tool_id(raw.tool_id)
    except InvalidInput as exc:
        raise ToolFormatError(str(exc)) from None
    where = f"tool {tool_id!r}"
    description, schema = _checked_content(raw.description, raw.schema, where)
    return Tool(
        tool_id=tool_id,
        description=description.strip(),
        tool_type=_checked_tool_type(raw.tool_type, where),
        input_schema=dict(schema),
        credentials=raw.credentials,
        pinned=raw.pinned,
        source_format=fmt,
    )


def _sidecar_fields(item: Mapping[str, Any]) -> _Fields:
    """The fields of a sidecar line, whose credentials and ``pinned`` are checked here."""
    unknown = set(item) - _SIDECAR_KEYS
    if unknown:
        raise ToolFormatError(f"unknown field(s) {', '.join(sorted(unknown))}")
    tool_id = item["tool_id"]
    credentials = _credentials(item.get("credentials", []), str(tool_id))
    pinned = item.get("pinned", False)
    if not isinstance(pinned, bool):
        raise ToolFormatError("pinned must be true or false")
    return _Fields(
        tool_id=tool_id,
        description=item.get("description"),
        schema=item.get("input_schema", {}),
        tool_type=item.get("tool_type") or "unspecified",
        credentials=credentials,
        pinned=pinned,
    )


def _foreign_fields(item: Mapping[str, Any], fmt: str) -> _Fields:
    """The fields of an MCP or OpenAI tool: neither has credentials or a pin; an MCP
    tool marked ``readOnlyHint`` is of type ``read`` (the memory holds warnings on reads
    to established rules)."""
    body = item["function"] if fmt == "openai-chat" else item
    description = body.get("description")
    if description is None and fmt == "mcp":
        description = body.get("title")
    hints = body.get("annotations") if fmt == "mcp" else None
    reads = isinstance(hints, Mapping) and hints.get("readOnlyHint") is True
    return _Fields(
        tool_id=body.get("name"),
        description=description,
        schema=body.get("inputSchema" if fmt == "mcp" else "parameters", {}),
        tool_type="read" if reads else "unspecified",
        credentials=(),
        pinned=False,
    )


def _checked_content(description: Any, schema: Any, where: str) -> tuple[str, Mapping[str, Any]]:
    """The description and the input schema (``None``: empty) of the tool ``where``,
    refused when of the wrong type, too large, or holding what no store can keep."""
    if description is None:
        description = ""
    if not isinstance(description, str):
        raise ToolFormatError(f"{where}: description must be a string")
    if len(description) > MAX_DESCRIPTION:
        raise ToolFormatError(f"{where}: description is over {MAX_DESCRIPTION} characters")
    if schema is None:
        schema = {}
    if not isinstance(schema, Mapping):
        raise ToolFormatError(f"{where}: input schema must be a JSON object")
    try:
        # text that cannot be stored, or nesting no schema needs, never reaches a store
        check_json_value(description, f"{where}: description")
        check_json_value(schema, f"{where}: input schema")
    except InvalidInput as exc:
        raise ToolFormatError(str(exc)) from None
    if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        raise ToolFormatError(f"{where}: input schema is over {MAX_SCHEMA_BYTES} bytes")
    return description, schema


def _checked_tool_type(tool_type: Any, where: str) -> str:
    if isinstance(tool_type, str):
        # the seed's types are enum names (SEARCH, PARSER): accepted in any case
        tool_type = tool_type.strip().lower()
    if not isinstance(tool_type, str) or not TOOL_TYPE_PATTERN.fullmatch(tool_type):
        raise ToolFormatError(
            f"{where}: tool_type must be a word of letters, digits and '_' starting with a "
            f"letter (any case), got {tool_type!r}"
        )
    return tool_type


def _credentials(raw: Any, tool_id: str) -> tuple[CredentialRef, ...]:
    if not isinstance(raw, list):
        raise ToolFormatError(f"tool {tool_id!r}: credentials must be a list of references")
    out: list[CredentialRef] = []
    for i, cred in enumerate(raw):
        where = f"tool {tool_id!r} credentials[{i}]"
        if not isinstance(cred, Mapping):
            raise ToolFormatError(f"{where} must be an object with 'ref'")
        unknown = set(cred) - _CREDENTIAL_KEYS
        if unknown:
            # A field such as "token" or "value" would carry the secret itself.
            raise SecretValueError(f"{where} field(s) {', '.join(sorted(unknown))}")
        ref = cred.get("ref")
        if not isinstance(ref, str) or not ref.strip() or len(ref) > 512:
            raise ToolFormatError(f"{where}.ref must be a non-empty string of at most 512 chars")
        scopes = cred.get("scopes", [])
        if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
            raise ToolFormatError(f"{where}.scopes must be a list of strings")
        provider = cred.get("provider")
        endpoint = cred.get("revocation_endpoint")
        for name, value in (("provider", provider), ("revocation_endpoint", endpoint)):
            if value is not None and not isinstance(value, str):
                raise ToolFormatError(f"{where}.{name} must be a string")
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise ToolFormatError(f"{where}.revocation_endpoint must be an http(s) URL")
        fields = {
            "ref": ref,
            "scopes": scopes,
            "provider": provider,
            "revocation_endpoint": endpoint,
        }
        try:
            for name, value in fields.items():
                check_json_value(value, f"{where}.{name}")
        except InvalidInput as exc:
            raise ToolFormatError(str(exc)) from None
        check_credential(CredentialRef(ref, tuple(scopes), provider, endpoint), where)
        out.append(CredentialRef(ref.strip(), tuple(scopes), provider, endpoint))
    return tuple(out)


def check_credential(cred: CredentialRef, where: str) -> None:
    """Refuse a credential reference any of whose fields looks like a secret value."""
    fields = [("ref", cred.ref), ("provider", cred.provider)]
    fields += [("revocation_endpoint", cred.revocation_endpoint)]
    fields += [(f"scopes[{j}]", scope) for j, scope in enumerate(cred.scopes)]
    for name, value in fields:
        why = looks_like_secret(value) if isinstance(value, str) else None
        if why:
            raise SecretValueError(f"{where}.{name} ({why})")


def read_documents(text: str, source: str) -> list[Any]:
    """Decode a file's text as JSON, else as JSON lines (blank lines skipped)."""
    stripped = text.strip()
    if not stripped:
        return []
    try:
        return [json.loads(stripped)]
    except json.JSONDecodeError:
        pass
    docs: list[Any] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            docs.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ToolFormatError(f"line {lineno}: not JSON ({exc.msg})", source=source) from None
    return docs


def load_tools(documents: Iterable[Any], source: str = "<input>") -> list[Tool]:
    """Every tool in ``documents``; a duplicate id keeps the last definition."""
    tools: dict[str, Tool] = {}
    for n, item in enumerate(t for doc in documents for t in expand(doc)):
        try:
            tool = parse_tool(item)
        except ToolFormatError as exc:
            raise ToolFormatError(f"tool #{n + 1}: {exc}", source=source) from None
        tools.pop(tool.tool_id, None)
        tools[tool.tool_id] = tool
    return list(tools.values())


def load_tool_file(path: str | Path) -> list[Tool]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ToolFormatError(f"cannot read: {exc.strerror}", source=str(p)) from None
    except UnicodeDecodeError:
        raise ToolFormatError("not UTF-8 text", source=str(p)) from None
    return load_tools(read_documents(text, str(p)), str(p))
