"""Question: is every page of the operator's console paginated on the server and quick
with 10,000 rules and 100,000 sessions?

Two homes, built through the library's own bulk paths (hashing embedder: the question
is about what the pages read, not about the model):

- a near-empty one, the baseline (:data:`BASELINE`: a few rules and sessions);
- one at size: ``--quick`` 500 rules and 5,000 sessions, ``--full`` 10,000 rules and
  100,000 sessions (:data:`QUICK`, :data:`FULL`).

Each is built the same way: a catalog of tool families (a lookup tool and an exchange
tool each, one family per hundred rules); the fatal sequences as abandoned chain
reports (``{"topology": [...], "outcome": "abandoned", "failure": {...}}``, two tools
each, none shared), 1,000 per :meth:`Sidecar.report_many` call; the sessions as completed
step reports with distinct session ids (a lookup of a delivered order, then its
exchange, which goes through), 1,000 per call; three refused exchanges of a pending
order per family (the memory's call conditions); and as many gateway decisions as
sessions, noted with :meth:`Sidecar.note_calls` 1,000 at a time (the decision log keeps
the newest 100,000).

Both homes are served by the same app (:func:`sidecar.shells.api.create_app`) through
starlette's ``TestClient``, signed in through the console's form.  Each page is asked
of both homes in round robin (:func:`benchmarks.harness.timing.interleaved`, one
warm-up round): the median at size over the median of the near-empty home is the
comparable figure; the milliseconds at size, measured on this machine, are what an
operator would wait.  Target: each page under 1 s at the full size.  Beside the pages,
the library calls they make are timed the same way at size, and each page's bytes are
counted (a page that grows with the home is not paginated on the server).

``python -m benchmarks.bench_console [--quick] [--out FILE]`` (JSON on stdout), or
``python -m benchmarks.run console [--quick | --full]``.
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import open_sidecar, quick_main
from benchmarks.harness.progress import progress
from benchmarks.harness.results import machine, md_table, md_targets, pyplot, save_figure, target
from benchmarks.harness.timing import interleaved, ratio

if TYPE_CHECKING:
    from sidecar import Sidecar

OPS = "ops-token-0123456789abcdef"
BATCH = 1_000
"""Reports per :meth:`Sidecar.report_many` call, calls per :meth:`Sidecar.note_calls`."""
FLUSH_EVERY = 5
"""``note_calls`` batches between two flushes of the decision log (its buffer holds
10,000: past it the oldest are dropped)."""
RULES_PER_FAMILY = 100
FAILING_PER_FAMILY = 3
REFUSAL = "Error: Non-delivered order cannot be exchanged"
SESSION_KEY = "session:session-0"
"""The first completed session's key (a local report's): a session with decisions."""
PAGE_MS = 1_000.0
"""What an operator would expect of a page at the full size (on this machine)."""


@dataclass(frozen=True)
class Sizes:
    rules: int
    sessions: int
    decisions: int
    repeat: int


BASELINE = Sizes(10, 100, 100, 0)
QUICK = Sizes(500, 5_000, 5_000, 5)
FULL = Sizes(10_000, 100_000, 100_000, 5)


# ---- the reports -------------------------------------------------------------------------
def families(sizes: Sizes) -> int:
    return max(1, sizes.rules // RULES_PER_FAMILY)


def _lookup(family: int, order: str, status: str) -> dict[str, Any]:
    return {"tool": f"get_order_{family}", "arguments": {"order_id": order},
            "output": {"order_id": order, "status": status}, "error": None}  # fmt: skip


def _exchange(family: int, order: str, error: str | None = None) -> dict[str, Any]:
    return {"tool": f"exchange_items_{family}", "arguments": {"order_id": order},
            "output": None if error else {"order_id": order, "status": "exchange requested"},
            "error": error}  # fmt: skip


def good_session(n: int, fams: int) -> dict[str, Any]:
    """Session ``n``: a delivered order looked up, then exchanged."""
    family, order = n % fams, f"#G{n}"
    return {"steps": [_lookup(family, order, "delivered"), _exchange(family, order)],
            "outcome": "completed", "session_id": f"session-{n}"}  # fmt: skip


def failing_session(family: int, k: int) -> dict[str, Any]:
    """A pending order's exchange, refused: what the call conditions are learned from."""
    order = f"#P{family}-{k}"
    return {"steps": [_lookup(family, order, "pending"), _exchange(family, order, REFUSAL)],
            "outcome": "abandoned", "session_id": f"failing-{family}-{k}"}  # fmt: skip


def fatal_chain(n: int) -> dict[str, Any]:
    """Chain ``n``: two tools of its own, the second failing after the first."""
    first, then = f"prepare_{n}", f"submit_{n}"
    return {
        "topology": [first, then],
        "outcome": "abandoned",
        "failure": {"signature": f"submit refused: quota {n} exceeded", "kind": None, "error": {}},
        "constraint": {"rule": f"IF {first} THEN {then} fails", "when": [], "gapped": False},
        "session_id": f"chain-{n}",
    }


def noted_call(n: int, sizes: Sizes) -> dict[str, Any]:
    """A gateway's decision for a call of session ``n`` (every tenth one blocked)."""
    fams = families(sizes)
    blocked = n % 10 == 0
    reasons = [{"rule_id": "r", "level": "block", "explanation": "refused before",
                "evidence": REFUSAL}] if blocked else []  # fmt: skip
    return {"session_id": f"session-{n % sizes.sessions}", "tool": f"exchange_items_{n % fams}",
            "arguments": {"order_id": f"#G{n}"}, "decision": "block" if blocked else "allow",
            "reasons": reasons}  # fmt: skip


def build(sc: Sidecar, sizes: Sizes, label: str) -> dict[str, float]:
    """``sizes``' rules, sessions and decisions reported into ``sc``; seconds per part."""
    from sidecar import Tool

    fams = families(sizes)
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    sc.add_tools(
        [Tool(f"get_order_{f}", f"look up an order of shop {f}") for f in range(fams)]
        + [Tool(f"exchange_items_{f}", f"exchange the items of shop {f}") for f in range(fams)]
    )
    seconds["tools"] = time.perf_counter() - started
    parts: dict[str, tuple[int, Callable[[int], dict[str, Any]]]] = {
        "chains": (sizes.rules, fatal_chain),
        "sessions": (sizes.sessions, lambda n: good_session(n, fams)),
    }
    for part, (count, make) in parts.items():
        started = time.perf_counter()
        for first in range(0, count, BATCH):
            sc.report_many([make(n) for n in range(first, min(count, first + BATCH))])
            progress(f"console: {label}: {part} {min(count, first + BATCH):,}/{count:,}")
        seconds[part] = time.perf_counter() - started
    started = time.perf_counter()
    failing = [failing_session(f, k) for f in range(fams) for k in range(FAILING_PER_FAMILY)]
    for first in range(0, len(failing), BATCH):
        sc.report_many(failing[first : first + BATCH])
    seconds["failing"] = time.perf_counter() - started
    started = time.perf_counter()
    for i, first in enumerate(range(0, sizes.decisions, BATCH)):
        last = min(sizes.decisions, first + BATCH)
        sc.note_calls([noted_call(n, sizes) for n in range(first, last)])
        if (i + 1) % FLUSH_EVERY == 0:
            sc.decisions.flush()
    sc.decisions.flush()
    seconds["decisions"] = time.perf_counter() - started
    return {k: round(v, 2) for k, v in seconds.items()}


# ---- the console -------------------------------------------------------------------------
@dataclass(frozen=True)
class Home:
    sc: Sidecar
    client: Any
    counts: dict[str, int]
    paths: dict[str, str]
    build_s: dict[str, float]


def sign_in(client: Any) -> None:
    """The console's sign-in form, posted as a browser would (its nonce first)."""
    page = client.get("/console/sign-in")
    nonce = re.search(r'name="nonce" value="([^"]+)"', page.text)
    if nonce is None:
        raise RuntimeError(f"no sign-in form: {page.text[:300]}")
    answer = client.post("/console/sign-in", data={"nonce": nonce.group(1), "token": OPS},
                         follow_redirects=False)  # fmt: skip
    if answer.status_code != 303:
        raise RuntimeError(f"signing in failed: {answer.status_code} {answer.text[:300]}")


def page_paths(sc: Sidecar) -> dict[str, str]:
    """Each page of the console, by name, with the ids it needs taken from the home:
    the newest rule, the first family's lookup tool, the first completed session (its
    decisions too), the second page of sessions, the last page of rules."""
    from urllib.parse import quote

    from sidecar.shells.console.web import PAGE_SIZE

    views = sc.constraints(include_lifted=True)
    sessions = sc.sessions_page(None, PAGE_SIZE)
    last_rules = max(1, -(-len(views) // PAGE_SIZE))
    after = sessions.next_cursor
    cursor = f"/console/sessions?cursor={quote(after)}" if after else "/console/sessions"
    return {
        "overview": "/console/overview",
        "rules": "/console/rules",
        "rules, last page": f"/console/rules?page={last_rules}",
        "rules, active": "/console/rules?status=active",
        "rule": f"/console/rules/{quote(views[-1].chain_id, safe='')}",
        "tools": "/console/tools",
        "tools, eviction decided": "/console/tools?decisions=1",
        "tool": "/console/tools/get_order_0",
        "sources": "/console/sources",
        "source": "/console/sources/local",
        "sessions": "/console/sessions",
        "sessions, next page": cursor,
        "session": f"/console/session?key={quote(SESSION_KEY, safe='')}",
        "review": "/console/review",
    }


def library_calls(sc: Sidecar, paths: Mapping[str, str]) -> dict[str, Callable[[], Any]]:
    """The library calls behind the pages, by what they are called with."""
    from sidecar.shells.console.figures import HOURS

    views = sc.constraints(include_lifted=True)
    return {
        "constraints(include_lifted=True)": lambda: sc.constraints(include_lifted=True),
        "constraints()": lambda: sc.constraints(),
        "constraint(id)": lambda: sc.constraint(views[-1].chain_id),
        "constraint_history(chain)": lambda: sc.constraint_history(views[-1].chain_id),
        "status(verify=False)": lambda: sc.status(verify=False),
        f"activity({HOURS})": lambda: sc.activity(HOURS),
        "activity(1)": lambda: sc.activity(1),
        "sessions_page(limit=1)": lambda: sc.sessions_page(limit=1),
        "sessions_page(None, 50)": lambda: sc.sessions_page(None, 50),
        "session_activity(key)": lambda: sc.session_activity(SESSION_KEY),
        "list_tools_page(None, 50)": lambda: sc.list_tools_page(None, 50),
        "hidden_tools()": sc.hidden_tools,
        "decide()": sc.decide,
        "mandates()": sc.mandates,
        "tool_history(tool)": lambda: sc.tool_history("get_order_0"),
        "quotas()": sc.quotas,
        "approvals(limit=50)": lambda: sc.approvals(limit=50),
    }


@contextmanager
def served(root: Path, sizes: Sizes, label: str) -> Iterator[Home]:
    """A home of ``sizes`` under ``root``, its console signed in."""
    from starlette.testclient import TestClient

    from indexes import HashingEmbedder
    from sidecar.shells.api import create_app

    with open_sidecar(root / label, HashingEmbedder()) as sc:
        build_s = build(sc, sizes, label)
        counts = {
            "rules": len(sc.constraints(include_lifted=True)),
            "sessions": sc.sessions_page(limit=1).total,
            "decisions": sizes.decisions,
            "tools": 2 * families(sizes),
        }
        progress(f"console: {label}: {counts}")
        app = create_app(sc, OPS, with_mcp=False)
        with TestClient(app, base_url="http://127.0.0.1") as client:
            sign_in(client)
            yield Home(sc, client, counts, page_paths(sc), build_s)


def fetcher(home: Home, path: str) -> Callable[[], int]:
    """One request of ``path``; its body's length (anything but a 200 stops the run)."""

    def get() -> int:
        answer = home.client.get(path, follow_redirects=False)
        if answer.status_code != 200:
            raise RuntimeError(f"{path}: {answer.status_code} {answer.text[:300]}")
        return len(answer.content)

    return get


def median(samples: list[float]) -> float:
    return round(statistics.median(samples), 2)


def time_pages(small: Home, large: Home, repeat: int) -> dict[str, dict[str, Any]]:
    """Each page of both homes in round robin: medians, their ratio and the bytes."""
    out: dict[str, dict[str, Any]] = {}
    for name in large.paths:
        fns = {
            "baseline": fetcher(small, small.paths[name]),
            "at_size": fetcher(large, large.paths[name]),
        }
        samples = interleaved(fns, repeat, warmup=1)
        base, at = median(samples["baseline"]), median(samples["at_size"])
        out[name] = {
            "path": large.paths[name],
            "baseline_ms": base,
            "at_size_ms": at,
            "ratio": ratio(at, base, 2),
            "baseline_bytes": fns["baseline"](),
            "at_size_bytes": fns["at_size"](),
        }
        progress(f"console: {name}: {base} ms -> {at} ms ({out[name]['ratio']}x)")
    return out


def time_calls(small: Home, large: Home, repeat: int) -> dict[str, dict[str, Any]]:
    """The library calls behind the pages, on both homes in round robin."""
    calls_small = library_calls(small.sc, small.paths)
    calls_large = library_calls(large.sc, large.paths)
    out: dict[str, dict[str, Any]] = {}
    for name in calls_large:
        samples = interleaved({"b": calls_small[name], "a": calls_large[name]}, repeat, warmup=1)
        base, at = median(samples["b"]), median(samples["a"])
        out[name] = {"baseline_ms": base, "at_size_ms": at, "ratio": ratio(at, base, 2)}
    return out


# ---- the run -----------------------------------------------------------------------------
def run(quick: bool = True, seed: int = 7) -> dict[str, Any]:
    del seed  # nothing random here
    sizes = QUICK if quick else FULL
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-console-") as tmp, ExitStack() as stack:
        small = stack.enter_context(served(Path(tmp), BASELINE, "baseline"))
        large = stack.enter_context(served(Path(tmp), sizes, "at_size"))
        pages = time_pages(small, large, sizes.repeat)
        calls = time_calls(small, large, sizes.repeat)
    return {
        "benchmark": "console",
        "question": "is every console page paginated on the server and quick with 10,000 "
        "rules and 100,000 sessions",
        "machine": machine(),
        "params": {"sizes": asdict(sizes), "baseline": asdict(BASELINE), "full": not quick},
        "homes": {
            "baseline": {"counts": small.counts, "build_s": small.build_s},
            "at_size": {"counts": large.counts, "build_s": large.build_s},
        },
        "pages": pages,
        "library_calls": calls,
        "targets": targets(pages, large.counts, full=not quick),
        "timings_s": {"total": round(time.perf_counter() - started, 1)},
    }


def targets(
    pages: Mapping[str, Mapping[str, Any]], counts: Mapping[str, int], full: bool
) -> list[dict[str, Any]]:
    size = f"{counts['rules']:,} rules, {counts['sessions']:,} sessions"
    return [
        target(
            f"console {name} ({p['path'].split('?')[0]}): median at {size}",
            f"< {PAGE_MS:,.0f} ms at 10,000 rules and 100,000 sessions",
            f"{p['at_size_ms']:,.1f} ms on this machine; {p['ratio']}x the near-empty home",
            (p["at_size_ms"] < PAGE_MS) if full else None,
            "" if full else "the goal is set at --full",
        )
        for name, p in pages.items()
        if name not in ACTIONS
    ]


ACTIONS = ("tools, eviction decided",)
"""Pages an operator asks for by a link that says it takes seconds: timed, no target."""


PAGE_HEADERS = ("page", "path at size", "near-empty ms", "at size ms (this machine)",
                "at size / near-empty", "KB near-empty", "KB at size")  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    homes = result["homes"]
    rows = [
        [name, f"`{p['path']}`", p["baseline_ms"], p["at_size_ms"], p["ratio"],
         round(p["baseline_bytes"] / 1024, 1), round(p["at_size_bytes"] / 1024, 1)]
        for name, p in result["pages"].items()
    ]  # fmt: skip
    calls = [
        [f"`{name}`", c["baseline_ms"], c["at_size_ms"], c["ratio"]]
        for name, c in sorted(result["library_calls"].items(), key=lambda kv: -kv[1]["at_size_ms"])
    ]
    homes_rows = [[label, *h["counts"].values(), sum(h["build_s"].values())]
                  for label, h in homes.items()]  # fmt: skip
    return "\n".join(
        [
            "## The console's pages",
            "",
            md_table(("home", "rules", "sessions", "decisions", "tools", "built in s"), homes_rows),
            "",
            "Median of each page's requests, both homes in round robin (one warm-up round).",
            "",
            md_table(PAGE_HEADERS, rows),
            "",
            "## The library calls behind the pages (slowest first)",
            "",
            md_table(("call", "near-empty ms", "at size ms", "at size / near-empty"), calls),
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    names = list(result["pages"])
    fig, ax = plt.subplots(figsize=(9, 3.8))
    ax.barh(names, [result["pages"][n]["at_size_ms"] for n in names])
    ax.axvline(PAGE_MS, color="red", linestyle="--", linewidth=1)
    counts = result["homes"]["at_size"]["counts"]
    ax.set_title(f"console page median (ms, this machine) at {counts['rules']:,} rules, "
                 f"{counts['sessions']:,} sessions")  # fmt: skip
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=8)
    return [save_figure(plt, fig, out_dir / "console.png")]


def main(argv: list[str] | None = None) -> None:
    quick_main(run, __doc__, argv)


if __name__ == "__main__":
    main()
