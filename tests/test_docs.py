"""The docs name only what exists: every repository path the README, BENCHMARKS.md and
the design notes name in code spans is a file or folder of the repository (design.md
names the library's modules from ``sidecar/``), so a module that moves takes its docs
with it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.docs import documentation

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"`([A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)+/?)`")
"""A code span that is a relative path: two parts or more, no spaces, no wildcards."""
FILE_ENDINGS = (".py", ".md", ".toml", ".txt", ".json", ".jsonl", ".sh", ".yaml", ".yml")
BASES = (ROOT, ROOT / "sidecar")
NOT_IN_THE_REPOSITORY = (
    "../",  # beside the repository (the shared datasets), not in it
    "cold/",  # inside a home: where an evicted tool's record moves
    "benchmarks/results/",  # what the benchmarks write (git ignores it)
    "build/",  # what the image build writes (git ignores it)
)


def named_paths(text: str) -> list[str]:
    found = []
    for match in PATH.finditer(text):
        path = match.group(1)
        if not (path.endswith(FILE_ENDINGS) or path.endswith("/")):
            continue  # a route (/v1/check), a type (sidecar/warnings), a version
        if not path.startswith(NOT_IN_THE_REPOSITORY):
            found.append(path)
    return found


def test_every_path_the_docs_name_exists() -> None:
    missing = [
        f"{doc.name}: {path}"
        for doc in DOCS
        for path in named_paths(doc.read_text())
        if not any((base / path).exists() for base in BASES)
    ]
    assert missing == []


MODULE = re.compile(r"`([A-Za-z0-9_]+\.py)`")


def test_every_module_the_docs_name_by_file_name_exists() -> None:
    """A module named without its folder (``core.py``) is one the repository has."""
    tops = ("sidecar", "indexes", "cold_store", "tests", "benchmarks", "examples", "deploy")
    files = {p.name for top in tops for p in (ROOT / top).rglob("*.py")}
    missing = [
        f"{doc.name}: {name}"
        for doc in DOCS
        for name in MODULE.findall(doc.read_text())
        if name not in files
    ]
    assert missing == []


def test_the_check_finds_paths_and_leaves_the_rest() -> None:
    text = (
        "see `sidecar/core.py`, `intake/commit.py`, `tests/integration/`, `no/such.py`, "
        "`POST /v1/check`, `sidecar/warnings`, `cold/tools/`, `a b/c.py`"
    )
    assert named_paths(text) == [
        "sidecar/core.py",
        "intake/commit.py",
        "tests/integration/",
        "no/such.py",
    ]
    assert not any((base / "no/such.py").exists() for base in BASES)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(text: str, level: str) -> list[str]:
    """The headings of ``level`` (``"# "``, ``"## "``) outside fenced blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith(level):
            out.append(line[len(level) :])
    return out


def test_the_readmes_contents_list_every_section_and_every_page_in_order() -> None:
    """The front page's contents: its own sections, then each docs page (its title) with
    the page's sections under it; ``docs/design.md`` is linked from *Where to read on*."""
    text = (ROOT / "README.md").read_text()
    own = _headings(text, "## ")
    assert own[0] == "Contents"
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    entries = re.findall(r"^( *)- \[(.+)\]\(([^)]+)\)$", contents, re.M)
    tops = [(name, link) for indent, name, link in entries if not indent]
    assert tops[: len(own) - 1] == [(h, f"#{_anchor(h)}") for h in own[1:]]
    pages = [p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "design.md"]
    listed_pages = [link for _, link in tops[len(own) - 1 :]]
    assert sorted(listed_pages) == sorted(f"docs/{p.name}" for p in pages)
    for page in pages:
        link = f"docs/{page.name}"
        page_text = page.read_text()
        (title,) = _headings(page_text, "# ")
        assert (title, link) in tops
        at = next(i for i, (_, _, target) in enumerate(entries) if target == link)
        under = []
        for indent, name, target in entries[at + 1 :]:
            if not indent:
                break
            under.append((name, target))
        assert under == [(h, f"{link}#{_anchor(h)}") for h in _headings(page_text, "## ")]


def test_the_front_page_stays_short() -> None:
    """What it is, the two commands, the three jobs with an example each, where to read
    on: the rest lives in ``docs/``."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def _readme() -> str:
    """The README and the docs pages: where a user looks for a route, a command, a tool."""
    return documentation()


def test_every_route_is_in_the_docs(tmp_path: Path) -> None:
    """Each route of the HTTP API, its parameters written ``{id}``, as ``METHOD /path``."""
    from indexes import HashingEmbedder
    from sidecar import Sidecar
    from sidecar.shells.api import create_app

    readme = _readme()
    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        paths = create_app(sc, "t" * 32).api.openapi()["paths"]  # type: ignore[attr-defined]
    routes = [
        f"{method.upper()} {re.sub(r'[{][^}]+[}]', '{id}', path)}"
        for path, operations in paths.items()
        if path.startswith("/v1/")
        for method in operations
    ]
    assert len(routes) > 20
    # as a code span of its own, or followed by its arguments or its query
    assert [r for r in routes if not any(f"`{r}{end}" in readme for end in "` ?")] == []


def test_every_cli_command_is_in_the_docs() -> None:
    import argparse

    from sidecar.shells.cli.parser import build_parser

    def commands(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
        out = []
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    out += [f"{prefix}{name}", *commands(sub, f"{prefix}{name} ")]
        return out

    found = commands(build_parser(), "")
    assert {"serve", "gateway", "constraints lift", "forget"} <= set(found)
    readme = _readme()
    assert [c for c in found if c not in readme] == []


def test_every_mcp_tool_is_in_the_docs(tmp_path: Path) -> None:
    import anyio

    from indexes import HashingEmbedder
    from sidecar import Sidecar
    from sidecar.shells.mcp_server import build_mcp

    with Sidecar.open(embedder=HashingEmbedder(), home=tmp_path / "home") as sc:
        tools = anyio.run(build_mcp(sc).list_tools)
    names = [t.name for t in tools]
    assert "check_plan" in names
    readme = _readme()
    assert [n for n in names if f"`{n}`" not in readme] == []


def test_the_operations_table_is_the_declarations() -> None:
    """``docs/service.md``'s table of operations is the one the declarations print:
    a declaration changed without the docs fails here, with the command that fixes it."""
    from sidecar.shells import operations

    page = ROOT / "docs" / "service.md"
    text = page.read_text()
    start, end = text.find(operations.BEGIN), text.find(operations.END)
    assert 0 <= start < end, f"{page.name} has lost its operations table"
    held = text[start : end + len(operations.END)]
    assert held == operations.markdown(), (
        "the operations table of docs/service.md is not the declarations': run "
        "`python -m sidecar.shells.operations --update docs/service.md`"
    )
    assert operations.updated(text) == text


def test_the_framework_snippets_are_python() -> None:
    """The framework recipes (*From your agent framework*, and each framework's
    approvals under *Approvals*) are fragments of an agent, not run here (the examples
    they come from run in ``tests/agents/gateway/test_examples.py``): each is Python."""
    import ast

    from tests.support.docs import blocks, section

    snippets = [
        "\n".join(lines)
        for title in ("Approvals", "From your agent framework")
        for lang, lines in blocks(section(title))
        if lang == "python"
    ]
    assert len(snippets) >= 7
    for code in snippets:
        ast.parse(code)  # a SyntaxError names the line
