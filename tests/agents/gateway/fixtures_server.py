"""An MCP server with the fixtures the official conformance suite calls (``test_*``
tools, ``test://`` resources, ``test_*`` prompts), so that the suite's checks of logging,
progress, sampling, elicitation, content kinds, resources and prompts have something to
check, directly and through the gateway.  Real subprocess: stdio, or streamable HTTP with
``--http PORT``.  The behaviours follow the suite's own descriptions of each scenario.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c63f8cfc0f01f0005000201a5f6a0b90000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(b"RIFF$\x00\x00\x00WAVEfmt " + bytes(24) + b"data\x00\x00\x00\x00").decode()
SCHEMA = {"type": "object", "properties": {}}


def _tool(name: str, properties: dict[str, Any] | None = None) -> types.Tool:
    schema = {"type": "object", "properties": properties or {}}
    return types.Tool(name=name, description=f"Conformance fixture {name}.", input_schema=schema)


TOOLS = [
    _tool("test_simple_text"),
    _tool("test_image_content"),
    _tool("test_audio_content"),
    _tool("test_embedded_resource"),
    _tool("test_multiple_content_types"),
    _tool("test_tool_with_logging"),
    _tool("test_error_handling"),
    _tool("test_tool_with_progress"),
    _tool("test_sampling", {"prompt": {"type": "string"}}),
    _tool("test_elicitation", {"message": {"type": "string"}}),
]


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _embedded(uri: str) -> types.EmbeddedResource:
    contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text="embedded text")
    return types.EmbeddedResource(type="resource", resource=contents)


def _image() -> types.ImageContent:
    return types.ImageContent(type="image", data=PNG, mime_type="image/png")


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    session, here = ctx.session, ctx.request_id
    name = params.name
    if name == "test_simple_text":
        return types.CallToolResult(content=[_text("This is a simple text response for testing.")])
    if name == "test_image_content":
        return types.CallToolResult(content=[_image()])
    if name == "test_audio_content":
        audio = types.AudioContent(type="audio", data=WAV, mime_type="audio/wav")
        return types.CallToolResult(content=[audio])
    if name == "test_embedded_resource":
        return types.CallToolResult(content=[_embedded("test://embedded-resource")])
    if name == "test_multiple_content_types":
        content = [
            _text("Multiple content types:"),
            _image(),
            _embedded("test://mixed-content-resource"),
        ]
        return types.CallToolResult(content=content)
    if name == "test_error_handling":
        return types.CallToolResult(content=[_text("This tool always fails")], is_error=True)
    if name == "test_tool_with_logging":
        for line in ("Tool execution started", "Tool processing data", "Tool execution completed"):
            note = types.LoggingMessageNotification(
                params=types.LoggingMessageNotificationParams(level="info", data=line)
            )
            await session.send_notification(note, related_request_id=here)
            await anyio.sleep(0.05)
        return types.CallToolResult(content=[_text("Logging done")])
    if name == "test_tool_with_progress":
        for done in (0, 50, 100):
            await session.report_progress(done, 100)
            await anyio.sleep(0.05)
        return types.CallToolResult(content=[_text("Progress done")])
    if name == "test_sampling":
        message = types.SamplingMessage(role="user", content=_text(str(args.get("prompt", ""))))
        answer = await session.create_message([message], max_tokens=100, related_request_id=here)
        text = getattr(answer.content, "text", "")
        return types.CallToolResult(content=[_text(f"LLM response: {text}")])
    if name == "test_elicitation":
        schema = {
            "type": "object",
            "properties": {
                "username": {"type": "string", "description": "User's response"},
                "email": {"type": "string", "description": "User's email address"},
            },
            "required": ["username", "email"],
        }
        reply = await session.elicit_form(str(args.get("message", "")), schema, here)
        content = _text(f"User response: action={reply.action}, content={reply.content}")
        return types.CallToolResult(content=[content])
    return types.CallToolResult(content=[_text(f"unknown tool {name}")], is_error=True)


RESOURCES = [
    types.Resource(uri="test://static-text", name="static text", mime_type="text/plain"),
    types.Resource(uri="test://static-binary", name="static binary", mime_type="image/png"),
    types.Resource(uri="test://watched-resource", name="watched", mime_type="text/plain"),
]


async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=RESOURCES)


async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
    template = types.ResourceTemplate(
        uri_template="test://template/{id}/data", name="template", mime_type="application/json"
    )
    return types.ListResourceTemplatesResult(resource_templates=[template])


async def read_resource(
    ctx: Any, params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    from mcp.shared.exceptions import MCPError

    uri = str(params.uri)
    contents: Any
    if uri == "test://static-binary":
        contents = types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG)
    elif uri in ("test://static-text", "test://watched-resource"):
        contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text="static text")
    elif uri.startswith("test://template/") and uri.endswith("/data"):
        item = uri.split("/")[3]
        text = f'{{"id": "{item}", "templateTest": true}}'
        contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
    else:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Resource {uri} not found")
    return types.ReadResourceResult(contents=[contents])


async def subscribe(ctx: Any, params: Any) -> types.EmptyResult:
    return types.EmptyResult()


PROMPTS = [
    types.Prompt(name="test_simple_prompt", description="A simple prompt."),
    types.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with arguments.",
        arguments=[
            types.PromptArgument(name="arg1", required=True),
            types.PromptArgument(name="arg2", required=True),
        ],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt with an embedded resource.",
        arguments=[types.PromptArgument(name="resourceUri", required=True)],
    ),
    types.Prompt(name="test_prompt_with_image", description="A prompt with an image."),
]


async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=PROMPTS)


async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    from mcp.shared.exceptions import MCPError

    args = params.arguments or {}
    content: Any
    if params.name == "test_simple_prompt":
        content = _text("This is a simple prompt for testing.")
    elif params.name == "test_prompt_with_arguments":
        content = _text(
            f"Prompt with arguments: arg1='{args.get('arg1')}', arg2='{args.get('arg2')}'"
        )
    elif params.name == "test_prompt_with_embedded_resource":
        content = _embedded(str(args.get("resourceUri", "test://example-resource")))
    elif params.name == "test_prompt_with_image":
        content = _image()
    else:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Prompt {params.name} not found")
    return types.GetPromptResult(messages=[types.PromptMessage(role="user", content=content)])


async def complete(ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
    values = [v for v in ("test", "testing", "tested") if v.startswith(params.argument.value)]
    return types.CompleteResult(completion=types.Completion(values=values, total=len(values)))


async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
    return types.EmptyResult()


server = Server(
    "conformance-fixtures",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_list_resource_templates=list_templates,
    on_read_resource=read_resource,
    on_subscribe_resource=subscribe,
    on_unsubscribe_resource=subscribe,
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
    on_completion=complete,
)
server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)


async def _stdio() -> None:
    from mcp.server.stdio import stdio_server

    options = server.create_initialization_options(NotificationOptions(resources_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        import uvicorn

        app = server.streamable_http_app()
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
    else:
        anyio.run(_stdio)
