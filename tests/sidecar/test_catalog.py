"""Tool intake: every accepted format, id rules, duplicates, secret refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sidecar import SecretValueError, ToolFormatError, load_tool_file, load_tools, parse_tool
from sidecar.demo import demo_tools
from sidecar.tools.catalog import detect_format

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def test_mcp_tool_object() -> None:
    tool = parse_tool({"name": "web.search", "description": "Search", "inputSchema": SCHEMA})
    assert (tool.tool_id, tool.description, tool.source_format) == ("web.search", "Search", "mcp")
    assert tool.input_schema == SCHEMA


def test_mcp_tools_list_result_and_jsonrpc_response() -> None:
    result = {"tools": [{"name": "a", "inputSchema": SCHEMA}, {"name": "b", "inputSchema": {}}]}
    assert [t.tool_id for t in load_tools([result])] == ["a", "b"]
    response = {"jsonrpc": "2.0", "id": 1, "result": {**result, "nextCursor": None}}
    assert [t.tool_id for t in load_tools([response])] == ["a", "b"]


def test_objects_with_model_dump_are_accepted() -> None:
    class FakeMcpTool:  # the shape of mcp.types.Tool (pydantic)
        def model_dump(self, by_alias: bool, exclude_none: bool) -> dict[str, Any]:
            assert by_alias and exclude_none
            return {"name": "get_weather", "description": "Weather", "inputSchema": SCHEMA}

    assert load_tools([FakeMcpTool()])[0].tool_id == "get_weather"


def test_openai_chat_completions_shape() -> None:
    item = {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather now", "parameters": SCHEMA},
    }
    tool = parse_tool(item)
    assert (tool.tool_id, tool.source_format, tool.input_schema) == (
        "get_weather",
        "openai-chat",
        SCHEMA,
    )


def test_openai_flattened_shape_with_and_without_type() -> None:
    flat = {"type": "function", "name": "f", "description": "d", "parameters": SCHEMA}
    bare = {"name": "g", "description": "d", "parameters": SCHEMA}
    assert parse_tool(flat).source_format == "openai"
    assert parse_tool(bare).source_format == "openai"


def test_sidecar_line_with_credentials_and_pin() -> None:
    line = {
        "tool_id": "email_send",
        "tool_type": "api_client",
        "description": "Send mail",
        "input_schema": SCHEMA,
        "credentials": [
            {
                "ref": "oauth:mail-client",
                "scopes": ["mail.send"],
                "provider": "mail",
                "revocation_endpoint": "https://auth.example.invalid/revoke",
            }
        ],
        "pinned": True,
    }
    tool = parse_tool(line)
    assert tool.pinned and tool.tool_type == "api_client"
    assert tool.credentials[0].ref == "oauth:mail-client"
    assert tool.credentials[0].scopes == ("mail.send",)
    assert tool.to_dict()["credentials"][0]["revocation_endpoint"].endswith("/revoke")


@pytest.mark.parametrize(
    "bad_id", ["", "has space", "a" * 129, "semi;colon", "a>b", "ünï", 42, None]
)
def test_ids_follow_mcp_name_rules(bad_id: object) -> None:
    with pytest.raises(ToolFormatError, match=r"tool name|must be a string"):
        parse_tool({"tool_id": bad_id, "description": "x"})


def test_valid_mcp_names() -> None:
    for name in ("a", "A-b_c.d", "x" * 128, "v2.tools.search"):
        assert parse_tool({"name": name, "inputSchema": {}}).tool_id == name


@pytest.mark.parametrize(
    "cred",
    [
        {"ref": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"},
        {"ref": "sk-" + "live0123456789abcdefABCDEF"},
        {"ref": "AKIAIOSFODNN7EXAMPLE"},
        {"ref": "vault://kv/x", "token": "abc"},
        {"ref": "vault://kv/x", "value": "abc"},
        {"ref": "Zx8Qw3Er7Ty1Ui5Op9As2Df6Gh0Jk4L"},
        {"ref": "https://user:pa55word@vault.internal/x"},
    ],
)
def test_secret_values_in_credentials_are_refused(cred: dict[str, Any]) -> None:
    with pytest.raises(SecretValueError, match="looks like a secret value"):
        parse_tool({"tool_id": "t", "description": "x", "credentials": [cred]})


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"foo": 1}, "not a tool definition"),
        ({"tool_id": "t", "colour": "red"}, "unknown field"),
        ({"tool_id": "t", "input_schema": []}, "input schema must be a JSON object"),
        ({"tool_id": "t", "description": 5}, "description must be a string"),
        ({"tool_id": "t", "tool_type": "Search Engine"}, "tool_type"),
        ({"tool_id": "t", "pinned": "yes"}, "pinned"),
        ({"tool_id": "t", "credentials": {"ref": "x"}}, "credentials must be a list"),
        ({"tool_id": "t", "credentials": [{"ref": ""}]}, "ref must be"),
        (
            {"tool_id": "t", "credentials": [{"ref": "a", "revocation_endpoint": "ftp://x"}]},
            "http",
        ),
    ],
)
def test_invalid_definitions_get_clear_errors(item: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolFormatError, match=message):
        parse_tool(item)


def test_duplicates_keep_the_last_definition() -> None:
    tools = load_tools(
        [{"tool_id": "t", "description": "old"}, {"tool_id": "t", "description": "new"}]
    )
    assert [(t.tool_id, t.description) for t in tools] == [("t", "new")]


def test_files_as_json_array_json_object_and_json_lines(tmp_path: Path) -> None:
    array = tmp_path / "a.json"
    array.write_text(json.dumps([{"name": "a", "inputSchema": {}}]))
    obj = tmp_path / "b.json"
    obj.write_text(json.dumps({"tools": [{"name": "b", "inputSchema": {}}]}))
    lines = tmp_path / "c.jsonl"
    lines.write_text('{"tool_id": "c"}\n\n{"type": "function", "name": "d", "parameters": {}}\n')
    assert [t.tool_id for t in load_tool_file(array)] == ["a"]
    assert [t.tool_id for t in load_tool_file(obj)] == ["b"]
    assert [t.tool_id for t in load_tool_file(lines)] == ["c", "d"]


def test_file_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"tool_id": "ok"}\n{not json\n')
    with pytest.raises(ToolFormatError, match=r"bad.jsonl: line 2: not JSON"):
        load_tool_file(bad)
    with pytest.raises(ToolFormatError, match="cannot read"):
        load_tool_file(tmp_path / "missing.json")
    broken = tmp_path / "item.jsonl"
    broken.write_text('{"tool_id": "ok"}\n{"tool_id": "x y"}\n')
    with pytest.raises(ToolFormatError, match=r"item.jsonl: tool #2: .*not a valid tool name"):
        load_tool_file(broken)


def test_detect_format_names() -> None:
    assert detect_format({"tool_id": "x"}) == "sidecar"
    assert detect_format({"name": "x", "inputSchema": {}}) == "mcp"
    assert detect_format({"type": "function", "function": {"name": "x"}}) == "openai-chat"


def test_the_demo_catalog_is_valid_and_large_enough() -> None:
    tools = demo_tools()
    assert len(tools) >= 50
    assert len({t.tool_id for t in tools}) == len(tools)
    assert all(t.description for t in tools)


@pytest.mark.parametrize(("given", "stored"), [("SEARCH", "search"), ("Parser", "parser")])
def test_seed_style_tool_types_are_accepted_in_any_case(given: str, stored: str) -> None:
    assert parse_tool({"tool_id": "t", "tool_type": given}).tool_type == stored
