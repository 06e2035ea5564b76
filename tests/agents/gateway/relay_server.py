"""An MCP server with everything besides plain tools, run by the relay tests as a real
subprocess (stdio), so that the gateway's relay of each feature is met end to end.

- resources: ``note://hello`` (text), the template ``note://items/{id}``; subscriptions,
  and ``touch(uri)`` announces ``notifications/resources/updated`` for the URI;
- prompts: ``greet(name)``; completion of its ``name`` argument (``Ada``, ``Alan``, ``Grace``);
- logging: ``logging/setLevel`` is kept, ``chatty()`` logs at debug, info and warning and
  sends only what the level lets through;
- ``count(n)``: ``n`` progress notifications, then ``counted n``;
- ``ask_llm(question)``: asks its client to sample a message and returns its text;
- ``ask_user(question)``: asks its client to elicit a ``name`` and returns the answer.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
NAMES = ("Ada", "Alan", "Grace")
state: dict[str, Any] = {"level": "debug", "subscribed": set()}

TOOLS = [
    types.Tool(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": properties},
    )
    for name, description, properties in (
        ("touch", "Announce that a resource changed.", {"uri": {"type": "string"}}),
        ("chatty", "Log three messages.", {}),
        ("count", "Report progress n times.", {"n": {"type": "integer"}}),
        ("ask_llm", "Ask the client's model.", {"question": {"type": "string"}}),
        ("ask_user", "Ask the client's user.", {"question": {"type": "string"}}),
    )
]


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    session, here = ctx.session, ctx.request_id
    if params.name == "touch":
        uri = str(args["uri"])
        if uri in state["subscribed"]:
            await session.send_resource_updated(uri)
        return _text(f"touched {uri}")
    if params.name == "chatty":
        for level in ("debug", "info", "warning"):
            if LEVELS.index(level) >= LEVELS.index(state["level"]):
                note = types.LoggingMessageNotification(
                    params=types.LoggingMessageNotificationParams(
                        level=level, data=f"a {level} line"
                    )
                )
                await session.send_notification(note, related_request_id=here)
        return _text("chatted")
    if params.name == "count":
        n = int(args["n"])
        for i in range(1, n + 1):
            await session.report_progress(i, n, f"step {i}")
            await anyio.sleep(0)
        return _text(f"counted {n}")
    if params.name == "ask_llm":
        question = types.TextContent(type="text", text=str(args["question"]))
        answer = await session.create_message(
            [types.SamplingMessage(role="user", content=question)],
            max_tokens=50,
            related_request_id=here,
        )
        return _text(f"the model said: {answer.content.text}")
    if params.name == "ask_user":
        reply = await session.elicit_form(
            str(args["question"]),
            {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            related_request_id=here,
        )
        return _text(f"the user {reply.action}: {(reply.content or {}).get('name')}")
    return types.CallToolResult(content=[], is_error=True)


async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[types.Resource(uri="note://hello", name="hello", mime_type="text/plain")]
    )


async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
    template = types.ResourceTemplate(uri_template="note://items/{id}", name="item")
    return types.ListResourceTemplatesResult(resource_templates=[template])


async def read_resource(
    ctx: Any, params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    uri = str(params.uri)
    if uri == "note://hello":
        text = "hello, world"
    elif uri.startswith("note://items/"):
        text = f"item {uri.rsplit('/', 1)[1]}"
    else:
        from mcp.shared.exceptions import MCPError

        raise MCPError(code=types.INVALID_PARAMS, message=f"Resource {uri} not found")
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, text=text)])


async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
    state["subscribed"].add(str(params.uri))
    return types.EmptyResult()


async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    state["subscribed"].discard(str(params.uri))
    return types.EmptyResult()


async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
    argument = types.PromptArgument(name="name", required=True)
    return types.ListPromptsResult(prompts=[types.Prompt(name="greet", arguments=[argument])])


async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    name = (params.arguments or {}).get("name", "you")
    content = types.TextContent(type="text", text=f"Say hello to {name}.")
    return types.GetPromptResult(messages=[types.PromptMessage(role="user", content=content)])


async def complete(ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
    prefix = params.argument.value
    values = [n for n in NAMES if n.startswith(prefix)]
    return types.CompleteResult(completion=types.Completion(values=values, total=len(values)))


async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
    state["level"] = params.level
    return types.EmptyResult()


server = Server(
    "relay-test",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_list_resource_templates=list_templates,
    on_read_resource=read_resource,
    on_subscribe_resource=subscribe,
    on_unsubscribe_resource=unsubscribe,
    on_list_prompts=list_prompts,
    on_get_prompt=get_prompt,
    on_completion=complete,
)
server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)


async def main() -> None:
    options = server.create_initialization_options(
        NotificationOptions(resources_changed=True, prompts_changed=True)
    )
    async with stdio_server() as (read, write):
        await server.run(read, write, options)


if __name__ == "__main__":
    anyio.run(main)
