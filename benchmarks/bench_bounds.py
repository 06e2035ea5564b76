"""Question: can one agent token make a running sidecar grow without bound by reporting
sessions whose steps name tools in no catalog, and do ordinary reports keep their speed
once it has tried?

The attack, as it was found: a real ``sidecar serve`` (its own process, an empty home
with two catalog tools, the hashing embedder: the question is about what the intake
keeps, not about the model) and a tokens file with one named agent token, ``alice``.
Alice sends 20 requests, each one session of 1,000 steps, every step naming a tool that
no catalog holds (``ghost_<request>_<step>``): the even sessions completed, every call
succeeding; the odd ones abandoned, every other call refused by a business rule
("invalid id"); each with a task text, so that lookups' usage learns from it too.

Before the attack, and after it, the operator sends 2,000 ordinary reports (two-step
sessions on the catalog's tools, with a task text, in requests of 100) after 200 of
warm-up: the time of those after over the time of those before, in the same run, is the
slowdown.  Measured around the attack: the server's resident set (``VmRSS``, and its
peak ``VmHWM``), the state's bytes on disk (``state.sqlite`` and its WAL, which keeps
the pages of recent transactions) and the bytes of the state's pages in use (SQLite's
``dbstat``, read beside the server).

Phases, each on a fresh home and server:

- ``as_written``: the settings' defaults;
- ``rates_off``: the step and new-tool-id rates off (``SIDECAR_STEP_RATE=0``,
  ``SIDECAR_NEW_TOOL_RATE=0``) and no evidence budget (``SIDECAR_EVIDENCE_BUDGET=0``):
  every attack request is taken, so what bounds the growth is the intake itself;
- ``catalog_flood``: the same token sends sessions of 1,000 steps on the catalog's own
  tools, each call with its own arguments and output, under an evidence budget of
  ``FLOOD_BUDGET`` bytes (rates off), until it is refused: the state's data grows by the
  budget and at most the request that crossed it, and the refusal is a 429 naming the
  budget.

Targets (``as_written`` and ``rates_off``): RSS grows by less than 300 MB, the state by
less than 30 MB, ordinary reports after the attack take at most 3x their time before.

``python -m benchmarks.bench_bounds [--quick] [--phases a,b] [--out FILE]`` (JSON on
stdout), or ``python -m benchmarks.run bounds``.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.progress import progress
from benchmarks.harness.results import machine, md_table, md_targets, pyplot, save_figure, target
from benchmarks.harness.services import clean_env, start_serve, stop_process, wait_announced
from benchmarks.harness.timing import ratio

ROOT = Path(__file__).resolve().parents[1]
ALICE = "alice-token-0123456789"
CATALOG = (
    {"tool_id": "get_order", "description": "look up an order by its id"},
    {"tool_id": "exchange_items", "description": "exchange delivered items of an order"},
)
PHASES: dict[str, dict[str, str]] = {
    "as_written": {},
    "rates_off": {
        "SIDECAR_STEP_RATE": "0",
        "SIDECAR_NEW_TOOL_RATE": "0",
        "SIDECAR_EVIDENCE_BUDGET": "0",
    },
    "catalog_flood": {"SIDECAR_STEP_RATE": "0", "SIDECAR_NEW_TOOL_RATE": "0"},
}
RSS_GROWTH_MB = 300.0
STATE_GROWTH_MB = 30.0
SLOWDOWN = 3.0
FLOOD_BUDGET = 4 * 1_048_576
FLOOD_SLACK = 1_048_576
"""What the request that crossed the budget may add past it (one session of 1,000 steps
is about 0.1 MB of evidence)."""
BATCH = 100


@dataclass(frozen=True)
class Sizes:
    requests: int
    steps: int
    ordinary: int
    warmup: int
    flood_requests: int
    flood_budget: int


FULL = Sizes(20, 1_000, 2_000, 500, 200, FLOOD_BUDGET)
QUICK = Sizes(4, 300, 400, 300, 60, FLOOD_BUDGET // 16)


# ---- bodies ----------------------------------------------------------------------------
def ghost_session(n: int, steps: int) -> dict[str, Any]:
    """One session of ``steps`` calls of tools no catalog holds (see the docstring)."""
    completed = n % 2 == 0
    out = []
    for i in range(steps):
        tool = f"ghost_{n}_{i}"
        refused = not completed and i % 2 == 1
        out.append(
            {
                "tool": tool,
                "arguments": {"id": f"x{n}-{i}", "n": i},
                "output": None if refused else {"id": f"x{n}-{i}", "status": "ok", "v": i},
                "error": f"Error: invalid id x{n}-{i} for {tool}" if refused else None,
            }
        )
    return {
        "steps": out,
        "outcome": "completed" if completed else "abandoned",
        "session_id": f"attack-{n}",
        "task_input": f"please do thing number {n} for me",
    }


def catalog_session(n: int, steps: int) -> dict[str, Any]:
    """``steps`` calls of the catalog's two tools, each with arguments and an output of
    its own (so that nothing is shared with another call)."""
    out = []
    for i in range(steps):
        order = f"#F{n}-{i}"
        note = f"{n}-{i}-" + "n" * 300
        if i % 2 == 0:
            call = {"tool": "get_order", "arguments": {"order_id": order, "note": note},
                    "output": {"order_id": order, "status": "delivered", "memo": note}}  # fmt: skip
        else:
            call = {"tool": "exchange_items", "arguments": {"order_id": order, "item": note},
                    "output": {"order_id": order, "status": "exchange requested"}}  # fmt: skip
        out.append({**call, "error": None})
    return {
        "steps": out,
        "outcome": "completed",
        "session_id": f"flood-{n}",
        "task_input": f"exchange the items of order number {n}",
    }


def ordinary_session(n: int, tag: str) -> dict[str, Any]:
    order = f"#B{n}"
    return {
        "steps": [
            {"tool": "get_order", "arguments": {"order_id": order},
             "output": {"order_id": order, "status": "delivered"}, "error": None},
            {"tool": "exchange_items", "arguments": {"order_id": order, "item_ids": ["i1"]},
             "output": {"order_id": order, "status": "exchange requested"}, "error": None},
        ],
        "outcome": "completed",
        "session_id": f"{tag}-{n}",
        "task_input": "exchange the shirt of my delivered order",
    }  # fmt: skip


# ---- the server ------------------------------------------------------------------------
def process_status(pid: int) -> dict[str, float]:
    """``VmRSS`` and ``VmHWM`` of a process, in MB."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024 / 1e6
    return out


def state_bytes(home: Path) -> int:
    """The state on disk: the SQLite file and its write-ahead log."""
    return sum(p.stat().st_size for p in home.glob("state.sqlite*") if p.is_file())


def state_data_bytes(home: Path) -> int:
    """The bytes of the state's pages in use, read beside the server (the file keeps
    pages freed, and the write-ahead log the pages of recent transactions)."""
    import sqlite3

    db = sqlite3.connect(f"file:{home / 'state.sqlite'}?mode=ro", uri=True)
    try:
        (used,) = db.execute("SELECT SUM(pgsize) FROM dbstat").fetchone()
        (free,) = db.execute("PRAGMA freelist_count").fetchone()
        (page,) = db.execute("PRAGMA page_size").fetchone()
    finally:
        db.close()
    return int(used) - int(free) * int(page)


def metric_lines(text: str, names: Sequence[str]) -> dict[str, float]:
    """The samples of ``/metrics`` whose name is one of ``names`` (labels kept)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r"(sidecar_[a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if match and match.group(1) in names:
            out[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return out


class Server:
    """``sidecar serve`` on a fresh home with ``alice``'s agent token and ``env``."""

    def __init__(self, home: Path, env: Mapping[str, str]) -> None:
        home.mkdir(parents=True)
        tokens = {"tokens": [{"name": "alice", "role": "agent", "token": ALICE}]}
        (home / "tokens.json").write_text(json.dumps(tokens))
        full = clean_env() | {"SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER": "hashing", **env}
        full["PYTHONPATH"] = str(ROOT)
        self.home = home
        self.log = (home.parent / f"{home.name}.stderr").open("wb")
        self.proc = start_serve(full, self.log)
        self.url = wait_announced(home, self.proc, 120, f"the server (see {self.log.name})")
        self.operator = {"Authorization": f"Bearer {(home / 'token').read_text().strip()}"}
        self.agent = {"Authorization": f"Bearer {ALICE}"}

    def stop(self) -> None:
        stop_process(self.proc, 120)
        self.log.close()


def _ordinary(client: Any, server: Server, count: int, tag: str) -> float:
    """Seconds the operator's ``count`` ordinary reports take, in requests of 100."""
    started = time.perf_counter()
    for first in range(0, count, BATCH):
        body = {"reports": [ordinary_session(first + k, tag) for k in range(BATCH)]}
        answer = client.post(f"{server.url}/v1/reports", json=body, headers=server.operator)
        if answer.status_code != 200:
            raise RuntimeError(f"an ordinary report was refused: {answer.text[:300]}")
    return time.perf_counter() - started


def _measure(server: Server) -> dict[str, float]:
    status = process_status(server.proc.pid)
    return {
        "rss_mb": round(status["VmRSS"], 1),
        "peak_mb": round(status["VmHWM"], 1),
        "state_mb": round(state_bytes(server.home) / 1e6, 2),
        "state_data_mb": round(state_data_bytes(server.home) / 1e6, 2),
    }


def _attack(client: Any, server: Server, bodies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each body as one request of alice's; the status of each, the first refusal's
    message, and the time taken."""
    codes: list[int] = []
    refusal = None
    started = time.perf_counter()
    for i, report in enumerate(bodies):
        answer = client.post(
            f"{server.url}/v1/reports", json={"reports": [report]}, headers=server.agent
        )
        codes.append(answer.status_code)
        if answer.status_code != 200 and refusal is None:
            refusal = answer.json().get("error", {}).get("message", answer.text[:300])
        progress(f"bounds: attack request {i + 1}/{len(bodies)}: {answer.status_code}")
    return {
        "statuses": {str(c): codes.count(c) for c in sorted(set(codes))},
        "first_refusal": refusal,
        "seconds": round(time.perf_counter() - started, 2),
    }


METRICS = (
    "sidecar_evidence_bytes",
    "sidecar_evidence_budget_bytes",
    "sidecar_reports_refused_total",
    "sidecar_uncataloged_steps_total",
)


def phase(name: str, sizes: Sizes, tmp: Path) -> dict[str, Any]:
    """One phase on a fresh server (see the docstring)."""
    import httpx

    env = dict(PHASES[name])
    if name == "catalog_flood":
        env["SIDECAR_EVIDENCE_BUDGET"] = str(sizes.flood_budget)
    server = Server(tmp / name, env)
    try:
        with httpx.Client(timeout=1800) as client:
            added = client.post(
                f"{server.url}/v1/tools", json={"tools": list(CATALOG)}, headers=server.operator
            )
            added.raise_for_status()
            _ordinary(client, server, sizes.warmup, "warm")
            time.sleep(1.0)  # the server builds its MCP mount in the background as it starts
            before_s = _ordinary(client, server, sizes.ordinary, "before")
            before = _measure(server)
            progress(f"bounds: {name}: ordinary reports {before_s:.2f} s; attack starts")
            if name == "catalog_flood":
                bodies = [catalog_session(n, sizes.steps) for n in range(sizes.flood_requests)]
                attack = _flood(client, server, bodies)
            else:
                bodies = [ghost_session(n, sizes.steps) for n in range(sizes.requests)]
                attack = _attack(client, server, bodies)
            after = _measure(server)
            after_s = _ordinary(client, server, sizes.ordinary, "after")
            metrics = client.get(f"{server.url}/metrics", headers=server.operator).text
    finally:
        server.stop()
    return {
        "env": env,
        "before": before,
        "after": after,
        "rss_growth_mb": round(after["rss_mb"] - before["rss_mb"], 1),
        "state_growth_mb": round(after["state_mb"] - before["state_mb"], 2),
        "state_data_growth_mb": round(after["state_data_mb"] - before["state_data_mb"], 2),
        "attack": attack,
        "ordinary_before_s": round(before_s, 3),
        "ordinary_after_s": round(after_s, 3),
        "slowdown": ratio(after_s, before_s, 2),
        "metrics": metric_lines(metrics, METRICS),
    }


def _flood(client: Any, server: Server, bodies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Alice's requests until the first refusal (or the last body)."""
    codes: list[int] = []
    refusal = None
    started = time.perf_counter()
    for i, report in enumerate(bodies):
        answer = client.post(
            f"{server.url}/v1/reports", json={"reports": [report]}, headers=server.agent
        )
        codes.append(answer.status_code)
        if i % 5 == 0 or answer.status_code != 200:
            progress(f"bounds: flood request {i + 1}: {answer.status_code}")
        if answer.status_code != 200:
            refusal = answer.json().get("error", {})
            break
    return {
        "statuses": {str(c): codes.count(c) for c in sorted(set(codes))},
        "taken": codes.count(200),
        "first_refusal": refusal,
        "seconds": round(time.perf_counter() - started, 2),
    }


# ---- the run -----------------------------------------------------------------------------
def run(quick: bool, seed: int = 7, phases: Sequence[str] | None = None) -> dict[str, Any]:
    del seed  # nothing random here
    sizes = QUICK if quick else FULL
    chosen = list(phases or PHASES)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-bounds-") as tmp:
        for name in chosen:
            progress(f"bounds: phase {name}")
            results[name] = phase(name, sizes, Path(tmp))
    return {
        "benchmark": "bounds",
        "question": "can one agent token grow a running sidecar without bound by naming "
        "tools in no catalog, and do ordinary reports keep their speed afterwards",
        "machine": machine(),
        "params": {
            "attack_requests": sizes.requests,
            "steps_per_request": sizes.steps,
            "ordinary_reports": sizes.ordinary,
            "flood_budget_bytes": sizes.flood_budget,
        },
        "phases": results,
        "targets": targets(results, sizes),
    }


def targets(results: Mapping[str, Any], sizes: Sizes) -> list[dict[str, Any]]:
    out = []
    for name in ("as_written", "rates_off"):
        r = results.get(name)
        if r is None:
            continue
        out += [
            target(f"{name}: RSS growth (MB)", f"< {RSS_GROWTH_MB:g}", r["rss_growth_mb"],
                   r["rss_growth_mb"] < RSS_GROWTH_MB),
            target(f"{name}: state growth (MB)", f"< {STATE_GROWTH_MB:g}", r["state_growth_mb"],
                   r["state_growth_mb"] < STATE_GROWTH_MB),
            target(f"{name}: ordinary reports after / before", f"<= {SLOWDOWN:g}",
                   r["slowdown"], r["slowdown"] <= SLOWDOWN),
        ]  # fmt: skip
    flood = results.get("catalog_flood")
    if flood is not None:
        refusal = flood["attack"]["first_refusal"] or {}
        named = "SIDECAR_EVIDENCE_BUDGET" in str(refusal.get("message", ""))
        bound = (sizes.flood_budget + FLOOD_SLACK) / 1e6
        out += [
            target("catalog_flood: refused with 429 naming the budget", "429, named",
                   f"{flood['attack']['statuses']}, named: {named}",
                   "429" in flood["attack"]["statuses"] and named),
            target("catalog_flood: state data growth (MB)",
                   f"< {bound:.1f} (budget + one request)", flood["state_data_growth_mb"],
                   flood["state_data_growth_mb"] < bound),
        ]  # fmt: skip
    return out


HEADERS = (
    "phase", "statuses", "RSS MB before", "after", "growth", "state MB before", "after",
    "growth", "data growth", "ordinary s before", "after", "after / before",
)  # fmt: skip


def markdown(result: dict[str, Any]) -> str:
    rows = [
        [
            name,
            json.dumps(r["attack"]["statuses"]),
            r["before"]["rss_mb"],
            r["after"]["rss_mb"],
            r["rss_growth_mb"],
            r["before"]["state_mb"],
            r["after"]["state_mb"],
            r["state_growth_mb"],
            r["state_data_growth_mb"],
            r["ordinary_before_s"],
            r["ordinary_after_s"],
            r["slowdown"],
        ]
        for name, r in result["phases"].items()
    ]
    p = result["params"]
    return "\n".join(
        [
            "## One agent token against a running server",
            "",
            f"{p['attack_requests']} requests of {p['steps_per_request']:,} steps on tools in "
            f"no catalog (the flood: sessions on the catalog's tools under a "
            f"{p['flood_budget_bytes']:,}-byte budget); {p['ordinary_reports']:,} ordinary "
            "reports before and after.",
            "",
            md_table(HEADERS, rows),
            "",
            md_targets(result["targets"]),
            "",
        ]
    )


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    names = list(result["phases"])
    growth = [result["phases"][n]["rss_growth_mb"] for n in names]
    state = [result["phases"][n]["state_growth_mb"] for n in names]
    left.bar(names, growth)
    left.axhline(RSS_GROWTH_MB, color="red", linestyle="--", linewidth=1)
    left.set_title("server RSS growth (MB)")
    right.bar(names, state)
    right.axhline(STATE_GROWTH_MB, color="red", linestyle="--", linewidth=1)
    right.set_title("state growth (MB)")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8)
    return [save_figure(plt, fig, out_dir / "bounds.png")]


def main(argv: list[str] | None = None) -> None:
    import argparse

    from benchmarks.harness.results import emit

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--phases", help=f"comma-separated, of {', '.join(PHASES)} (default all)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    phases = [p.strip() for p in args.phases.split(",")] if args.phases else None
    unknown = set(phases or ()) - set(PHASES)
    if unknown:
        parser.error(f"unknown phase(s): {', '.join(sorted(unknown))}")
    emit(run(args.quick, phases=phases), args.out)


if __name__ == "__main__":
    main()
