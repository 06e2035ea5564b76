"""What the framework examples share: ``sidecar gateway`` started in front of the toy shop
(``shop_server.py``) on a fresh home, and the scripted tasks their agents run.

The standard library and anyio (every MCP client brings it): an agent's framework lives
in the agent's own environment (the LangGraph example runs where ``mcp`` 1.x is
installed), so this starts the gateway with the sidecar's own command (``sidecar`` on
``PATH``, else this checkout's ``.venv/bin/sidecar``).

Each task is what an agent would do to exchange the shirt of an order: look the order
up, try the exchange, and say how the task ended (``report_outcome``).  Ten customers
first exchange delivered orders (the successes the memory tests a failure against);
then two runs meet the shop's refusal on pending orders (the second is warned: the
memory has seen one such failure), the third retries the first and is refused by the
gateway before it reaches the shop, and the last, on a delivered order, goes through.
"""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio

HERE = Path(__file__).resolve().parent
WARM_UP = ["#W3", "#W4", "#W6", "#W7", "#W8", "#W9", "#W10", "#W11", "#W12", "#W13"]
RUNS = [("#W1", "pending"), ("#W2", "pending"), ("#W1", "pending"), ("#W3", "delivered")]
WARNING = "[sidecar warning]"
SETTLE_S = 3.0
"""A little more than the gateway's quiet time before a session's calls are evidence
(2 s): a client that keeps no session cannot say when its task ended."""
REFUSED = "Refused:"

Call = Callable[[str, dict[str, Any]], Awaitable[tuple[str, bool]]]
"""One tool call through an agent's framework: the text the framework hands the model,
and whether it marked it an error."""
Session = Callable[[], AbstractAsyncContextManager[Call]]
"""What a task runs in: a framework's session (or none), yielding how to call a tool."""


def sidecar_command() -> str:
    found = shutil.which("sidecar") or str(Path(sys.executable).with_name("sidecar"))
    if Path(found).exists():
        return found
    return str(HERE.parent / ".venv" / "bin" / "sidecar")


@contextlib.contextmanager
def gateway(home: Path, *options: str) -> Iterator[tuple[str, str]]:
    """``sidecar gateway shop='python shop_server.py'`` on ``home``: its URL and token.
    It prints "serving" only once it serves, so its first line says where."""
    shop = f"shop=python {shlex.quote(str(HERE / 'shop_server.py'))}"
    proc = subprocess.Popen(
        [sidecar_command(), "--home", str(home), "gateway", "--port", "0", *options, shop],
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


def arguments(description: str, modes: tuple[str, ...] = ()) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", help="a gateway already serving (else one is started)")
    parser.add_argument("--token", help="its bearer token (with --url)")
    parser.add_argument("--home", type=Path, help="the started gateway's home")
    if modes:
        parser.add_argument("--mode", choices=modes, default=modes[0])
    parser.add_argument(
        "--scenario",
        choices=("story", "protocols"),
        default="story",
        help="the walk-through (story), or agent after agent (protocols)",
    )
    args = parser.parse_args()
    if args.url and not args.token:
        parser.error("--url needs --token")
    return args


@contextlib.contextmanager
def target(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """The gateway's URL and token: ``--url``'s, or one started for the run."""
    if args.url:
        yield args.url, args.token
        return
    with contextlib.ExitStack() as stack:
        home = args.home or Path(stack.enter_context(tempfile.TemporaryDirectory())) / "home"
        yield stack.enter_context(gateway(home))


def ended(text: str, is_error: bool) -> str:
    """How the exchange went, as the agent can tell from the text it was handed."""
    if text.startswith(REFUSED):
        return "refused"
    if WARNING in text:
        return "warned"
    return "failed" if is_error else "done"


async def task(session: Session, order: str) -> tuple[str, bool]:
    """Look the order up, try the exchange, say how it ended: what the exchange showed."""
    async with session() as call:
        await call("get_order", {"order_id": order})
        text, is_error = await call("exchange", {"order_id": order, "item": "blue shirt"})
        outcome = "abandoned" if is_error else "completed"
        await call("report_outcome", {"outcome": outcome, "task": f"exchange {order}"})
    return text, is_error


async def protocols(session: Session) -> list[str]:
    """Agents one after another, each its own task (``--scenario protocols``): what a
    client gets from the memory, whatever keeps (or does not keep) its session.

    - *repeat*: six customers exchange delivered orders; then three agents make the very
      same exchange of the pending ``#W1``: the first fails, the second is warned (the
      first's failure is evidence as soon as it came back), the third is refused;
    - *situations*: three agents fail on three pending orders, eleven exchange delivered
      ones; a fourth agent's exchange of another pending order is refused, and further
      exchanges of delivered orders go through with no warning."""
    out = []
    for order in ("#W6", "#W7", "#W8", "#W9", "#W10", "#W11"):
        await task(session, order)
    repeat = []
    for _ in range(3):
        repeat.append(ended(*await task(session, "#W1")))
        await anyio.sleep(1.0)  # the next agent comes a moment later
    print(f"repeat: {', '.join(repeat)}")
    out += repeat
    failed = [ended(*await task(session, f"#W{n}")) for n in (40, 41, 42)]
    done = [ended(*await task(session, f"#W{n}")) for n in range(12, 23)]
    await anyio.sleep(SETTLE_S)  # what those sessions saw is evidence by then
    fourth = ended(*await task(session, "#W43"))
    delivered = [ended(*await task(session, f"#W{n}")) for n in (23, 24, 25)]
    print(
        f"situations: {', '.join(failed)}; delivered {done.count('done')} of {len(done)} "
        f"done; the fourth {fourth}; then delivered {', '.join(delivered)}"
    )
    return [*out, *failed, fourth, *delivered]


async def play(session: Session, which: str = "story") -> list[str]:
    """The scenario ``--scenario`` names."""
    return await (protocols if which == "protocols" else scenario)(session)


async def scenario(session: Session) -> list[str]:
    """The warm-up, then the four runs; prints what the agent saw, returns how each
    exchange ended."""
    warm = [ended(*await task(session, order)) for order in WARM_UP]
    print(f"warm-up: {warm.count('done')} of {len(warm)} exchanges of delivered orders done")
    out = []
    for number, (order, status) in enumerate(RUNS, 1):
        text, is_error = await task(session, order)
        how = ended(text, is_error)
        out.append(how)
        print(f"run {number}, {order} ({status}): exchange {how}")
        print("\n".join(f"    {line}" for line in text.splitlines()))
    print(f"runs: {', '.join(out)}")
    return out
