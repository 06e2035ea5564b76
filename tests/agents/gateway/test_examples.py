"""The gateway examples and the framework recipes run as the README shows them, each
against a real gateway it starts in front of the example shop: the plain ``mcp`` client
(one session per task, and one per call), an OpenTelemetry-instrumented agent, the
OpenAI Agents SDK (in this environment: an ``mcp`` 2.x client), and LangGraph with
``langchain-mcp-adapters`` (an ``mcp`` 1.x client: in an environment of its own, built
from the registry once and kept under this virtual environment).  Each scripted agent
must see a failure, a warning in the text its framework hands the model, a refusal and
an allowed call."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.envs import requirements_env

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
RUNS = "runs: failed, warned, refused, done"


def _run(python: str, example: str, tmp_path: Path, *args: str) -> str:
    env = {
        **os.environ,
        "SIDECAR_EMBEDDER": "hashing",  # the recipe, not the model, is under test
        "SIDECAR_MODEL_CACHE": str(tmp_path / "models"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        [python, str(EXAMPLES / example), "--home", str(tmp_path / "h"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    out = done.stdout
    if "protocols" in args:
        return out
    assert "warm-up: 10 of 10 exchanges of delivered orders done" in out
    assert out.strip().endswith(RUNS), out
    warned = out.split("run 2, #W2 (pending): exchange warned")[1].split("run 3,")[0]
    assert "Non-delivered order cannot be exchanged" in warned  # the shop's own error ...
    assert "[sidecar warning] exchange was run, but calls like this one failed before" in warned
    assert "has status 'pending'" in warned  # ... and the rule, in the text the agent reads
    refused = out.split("run 3, #W1 (pending): exchange refused")[1].split("run 4,")[0]
    assert "Refused: exchange was not run, because calls like this one failed before." in refused
    assert "cold://chains/" in refused
    assert "If this block is wrong, call appeal_block with this tool" in refused
    assert '"exchanged": "blue shirt"' in out.split("run 4, #W3 (delivered): exchange done")[1]
    return out


@pytest.mark.parametrize("mode", ["session", "stateless"])
def test_the_plain_mcp_client(tmp_path: Path, mode: str) -> None:
    out = _run(sys.executable, "gateway_agent.py", tmp_path, "--mode", mode).splitlines()
    # what the docs show is what the agent printed
    from tests.support.docs import blocks, matches

    for readme, title in (
        (ROOT / "docs" / "gateway.md", "## No code"),
        (EXAMPLES / "README.md", "## The MCP"),
    ):
        text = readme.read_text()
        start = text.index(title)
        part = text[start : text.find("\n## ", start + 1)]
        # the walk-through's output is the section's first text block
        shown = next(lines for lang, lines in blocks(part) if lang == "text")
        assert matches(shown, out), (readme, "\n".join(out))


def test_an_opentelemetry_instrumented_agent(tmp_path: Path) -> None:
    _run(sys.executable, "otel_gateway_agent.py", tmp_path)


def test_the_openai_agents_sdk_with_strict_schemas(tmp_path: Path) -> None:
    pytest.importorskip("agents", reason="openai-agents is not installed: pip install '.[agents]'")
    out = _run(sys.executable, "openai_agents_agent.py", tmp_path)
    assert out.startswith("tools (strict): appeal_block, exchange, get_order, report_outcome\n")


@pytest.mark.parametrize("mode", ["stateless", "session"])
def test_langgraph_with_langchain_mcp_adapters(tmp_path: Path, mode: str) -> None:
    out = _run(str(framework_env("langgraph")), "langgraph_agent.py", tmp_path, "--mode", mode)
    assert out.startswith(f"mode: {mode}\n")


def framework_env(name: str) -> Path:
    """The Python of ``examples/requirements-NAME.txt``'s own environment, kept under this
    virtual environment (``frameworks/NAME``: :func:`tests.envs.requirements_env`)."""
    home = Path(sys.prefix) / "frameworks" / name
    return requirements_env(EXAMPLES / f"requirements-{name}.txt", home) / "python"


PROTOCOLS = (
    "repeat: failed, warned, refused",
    # the third pending order is refused already: two situations and the successes
    # before them are enough; the fourth is, and delivered orders are never warned
    "situations: warned, warned, refused; delivered 11 of 11 done; the fourth refused; "
    "then delivered done, done, done",
)


@pytest.mark.parametrize(
    ("example", "mode"),
    [
        ("gateway_agent.py", "stateless"),  # a new MCP session for every call
        ("gateway_agent.py", "modern"),  # the 2026-07-28 protocol: no MCP session at all
        ("langgraph_agent.py", "stateless"),  # langchain-mcp-adapters' default client
        ("openai_agents_agent.py", None),  # the Agents SDK: one session per connection
    ],
)
def test_every_client_gets_the_verdicts_of_a_client_that_keeps_its_session(
    tmp_path: Path, example: str, mode: str | None
) -> None:
    """Agent after agent, with each framework's default client and the gateway's
    defaults: the very call that failed is warned at once and refused from the third
    try; three situations refuse a fourth agent's pending order, and leave the
    delivered ones unwarned (``examples/shop_gateway.py``, ``protocols``)."""
    if example == "openai_agents_agent.py":
        pytest.importorskip("agents", reason="openai-agents is not installed")
    python = str(framework_env("langgraph")) if example.startswith("langgraph") else sys.executable
    flags = ("--mode", mode) if mode else ()
    out = _run(python, example, tmp_path, *flags, "--scenario", "protocols").splitlines()
    assert tuple(out[-2:]) == PROTOCOLS, "\n".join(out)
