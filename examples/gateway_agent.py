"""A scripted agent (no LLM) that works through ``sidecar gateway`` with the ``mcp``
client, and shows the failure memory stop a call that failed before, with no code of
its own beyond an MCP client.

Each task is one agent run in its own MCP session: look the order up, try the exchange,
then say how the task ended (``report_outcome``).  Ten customers first exchange
delivered orders (the successes the memory tests a failure against: without them
nothing tells which difference made the others fail); then two runs meet the shop's
refusal on pending orders; the next retries the first and the gateway refuses it
before it reaches the shop, naming the rule and its evidence; the last, on a delivered
order, goes through.

    python examples/gateway_agent.py
        starts ``sidecar gateway shop='python examples/shop_server.py'`` on a fresh home,
        runs the four tasks, stops it
    python examples/gateway_agent.py --url http://127.0.0.1:8766/mcp --token TOKEN
        runs them against a gateway already serving (in front of the same shop)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
WARM_UP = ["#W3", "#W4", "#W6", "#W7", "#W8", "#W9", "#W10", "#W11", "#W12", "#W13"]
TASKS = [
    ("exchange the shirt of order #W1 for a blue one", "#W1"),
    ("exchange the shirt of order #W2 for a blue one", "#W2"),
    ("exchange the shirt of order #W1 for a blue one, again", "#W1"),
    ("exchange the shirt of order #W3 for a blue one", "#W3"),
]


def _text(result: Any) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


@contextlib.asynccontextmanager
async def session(url: str, token: str) -> AsyncIterator[Any]:
    """One MCP session with the gateway (one agent run)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as s,
    ):
        await s.initialize()
        yield s


async def run_task(
    url: str, token: str, number: int, task: str, order: str, show: bool = True
) -> str:
    """The agent's loop for one task; returns how it ended."""
    say = print if show else (lambda *_args: None)
    say(f"run {number}: {task}")
    async with session(url, token) as s:
        listed = {tool.name for tool in (await s.list_tools()).tools}
        assert {"get_order", "exchange", "report_outcome"} <= listed
        looked = await s.call_tool("get_order", {"order_id": order})
        say(f"  get_order {order} -> {json.dumps(looked.structured_content)}")
        arguments = {"order_id": order, "item": "blue shirt"}
        tried = await s.call_tool("exchange", arguments)
        text = _text(tried)
        if tried.is_error and text.startswith("Refused:"):
            ended = "refused"
            say("  exchange -> refused by the gateway, not sent to the shop:")
            say("\n".join(f"    {line}" for line in text.splitlines()))
        elif tried.is_error:
            ended = "failed"
            say(f"  exchange -> failed: {text}")
        else:
            ended = "done"
            say(f"  exchange -> {json.dumps(tried.structured_content)}")
        outcome = "completed" if ended == "done" else "abandoned"
        await s.call_tool("report_outcome", {"outcome": outcome, "task": task})
        say(f"  report_outcome {outcome}")
    return ended


async def run_all(url: str, token: str) -> list[str]:
    warm = [
        await run_task(url, token, 0, f"exchange the shirt of order {o}", o, show=False)
        for o in WARM_UP
    ]
    print(f"warm-up: {warm.count('done')} of {len(warm)} exchanges of delivered orders done")
    return [await run_task(url, token, i, task, order) for i, (task, order) in enumerate(TASKS, 1)]


@contextlib.contextmanager
def gateway(home: Path) -> Iterator[tuple[str, str]]:
    """``sidecar gateway`` in front of the example shop, on ``home``: its URL and token.
    It prints "serving" only once it serves, so the first line says where."""
    exe = shutil.which("sidecar") or str(Path(sys.executable).with_name("sidecar"))
    shop = f"shop={sys.executable} {HERE / 'shop_server.py'}"
    proc = subprocess.Popen(
        [exe, "--home", str(home), "gateway", "--port", "0", shop],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        if not line.startswith("sidecar gateway serving "):
            proc.wait(timeout=60)
            raise SystemExit(f"the gateway did not start: {line.strip()}")
        yield line.split()[3], (home / "token").read_text().strip()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stderr is not None:
            proc.stderr.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a gateway already serving (else one is started)")
    parser.add_argument("--token", help="its bearer token (with --url)")
    parser.add_argument(
        "--home", type=Path, help="the home of the started gateway (else a temporary one)"
    )
    args = parser.parse_args(argv)
    if args.url:
        if not args.token:
            parser.error("--url needs --token")
        ended = anyio.run(run_all, args.url, args.token)
    else:
        with contextlib.ExitStack() as stack:
            home = args.home or Path(stack.enter_context(tempfile.TemporaryDirectory())) / "home"
            url, token = stack.enter_context(gateway(home))
            ended = anyio.run(run_all, url, token)
    print(f"runs: {', '.join(ended)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
