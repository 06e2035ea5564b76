"""Question: on real agent trajectories, does a successor re-assemble a tool chain that an
earlier agent abandoned, with a plain tool index, with the seed's prefix check, and with
the sidecar; what does the sidecar cost viable tasks in recall; how many schema tokens
does each hand the agent per lookup?

Protocol (deterministic for a seed; ``BENCHMARKS.md`` has the long form):

1. Corpus: ToolBench's 600 tooleval trajectories (real failures) and, for scale,
   Seal-Tools (4,076 tools, ordered chains, a seeded share designated abandoned); see
   :mod:`benchmarks.datasets` for every parsing choice.
2. Split by task id, seeded, into a history half and a successor half.
3. One Sidecar home holds the catalog, embedded with all-MiniLM-L6-v2 (the real model).
   The history half is reported to it (completed chains as usage evidence; abandoned
   chains with the failure signature the trajectory shows, an unknown kind reported as
   deterministic).  The fatal sequences are the archived chains.  Every system queries
   this same Chroma collection, in phases, because two identical Chroma builds do not
   answer alike (HNSW insertion is not deterministic: ~1% of top-5 pages differ), which
   would blur a 1% recall comparison: ``plain`` (the index searched directly, no
   archive) and ``constraints_only`` (ablation) before any eviction; ``evict_3chains``
   (ablation) after ``evict(min_chains=3)``; ``sidecar`` after ``evict()`` under the
   default policy (a tool leaves once two or more distinct archived chains drive it and
   no completed chain used it); ``evict_1chain`` (ablation) after
   ``evict(min_chains=1)``, where one abandoned chain is enough.  Each policy evicts a
   superset of the previous one, so the phases run in that order on one index.
4. Re-assembly: a successor faces each archived task (its text is the query) and builds
   its chain one lookup per step (``after`` = what it executed so far), taking the tool
   the original agent took at that step when it is in the top-k, else the top hit, and
   stopping when it completes a fatal sequence.  ``plain`` executes what it composed;
   ``seed_check`` composes with plain retrieval and runs the seed's
   ``check_prefix_collision`` on the composed plan first (a blocked plan is not run);
   ``sidecar`` composes with constraint-aware lookup.
5. Collateral: for each completed successor-half task, at each step ``i`` the lookup
   (task text, ``after`` = its first ``i`` tools) either holds tool ``i`` in its top-k
   or not: recall@k per step, plain vs sidecar.  The seed's check and the sidecar's
   check are also run on those viable plans (a block there is a false alarm).
6. Context: schema tokens (the MCP ``name``/``description``/``inputSchema`` JSON, model
   tokenizer) of the top-k handed to the agent per lookup, plus the sidecar's warnings.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import DEFAULT_DATASETS, model_embedder, open_sidecar
from benchmarks.datasets import Corpus, Task, seal_tools, toolbench
from benchmarks.harness.progress import progress, steps
from benchmarks.harness.results import (
    emit,
    machine,
    target,
)
from benchmarks.harness.timing import ratio
from benchmarks.pollution_report import ABLATIONS, HEADLINE, SYSTEMS, markdown, plot
from benchmarks.pollution_world import (
    CachedEmbedder,
    FatalSequences,
    Lookup,
    Lookups,
    Page,
    Tally,
    World,
    compose,
    mcp_schema_text,
    replayed_prefix,
    report_line,
    split,
)
from benchmarks.seed import seed_archive, seed_check

if TYPE_CHECKING:
    from sidecar import Sidecar

__all__ = ["markdown", "plot", "run"]
QUICK_SEAL = {"max_tasks": 600, "max_tools": 1500}
FULL_SEEDS = 5


def reassembly(
    world: World, tasks: Sequence[Task], lookups: dict[str, Lookup]
) -> dict[str, dict[str, Any]]:
    """Re-assembly per system over ``tasks`` (each successor facing its own chain);
    ``seed_check`` comes with ``plain``: the seed checks the plan plain retrieval built."""
    names = [*lookups, *(["seed_check"] if "plain" in lookups else [])]
    counts: dict[str, dict[str, int]] = {
        s: {
            "successors": len(tasks),
            "reassembled": 0,
            "doomed_prefix_calls": 0,
            "prefix_replay_calls": 0,
            "calls": 0,
        }
        for s in names
    }
    if "seed_check" in counts:
        counts["seed_check"] |= {"plans_blocked": 0, "plans_blocked_without_fatal_sequence": 0}
    tallies: dict[str, Tally] = {}
    for system, lookup in lookups.items():
        tally = tallies[system] = Tally()
        for task in tasks:
            walk = compose(world, lookup, task, tally)
            runs = [system]
            if system == "plain":
                if world.seed is not None and not seed_check(world.seed, walk.executed)[0]:
                    c = counts["seed_check"]
                    c["plans_blocked"] += 1
                    c["plans_blocked_without_fatal_sequence"] += walk.fatal is None
                else:
                    runs.append("seed_check")
            for s in runs:
                c = counts[s]
                c["calls"] += len(walk.executed)
                c["prefix_replay_calls"] += replayed_prefix(walk, task.chain)
                if walk.fatal is not None:
                    c["reassembled"] += 1
                    c["doomed_prefix_calls"] += len(walk.fatal) - 1
    if "seed_check" in counts:
        tallies["seed_check"] = tallies["plain"]  # same retrieval
    out: dict[str, dict[str, Any]] = {}
    for s in names:
        c = counts[s]
        n = c["successors"] or 1
        out[s] = {
            **c,
            "reassembly_rate": round(c["reassembled"] / n, 4),
            "doomed_prefix_calls_per_successor": round(c["doomed_prefix_calls"] / n, 3),
            "lookups": tallies[s].to_dict(),
            "_tally": tallies[s],
        }
    return out


def collateral(
    world: World, tasks: Sequence[Task], lookups: dict[str, Lookup]
) -> dict[str, dict[str, Any]]:
    """Recall@k of viable (completed) successor chains at each step, and false blocks."""
    out: dict[str, dict[str, Any]] = {}
    multi = [t for t in tasks if len(t.chain) >= 2]
    evicted_steps = sum(t in world.evicted for task in tasks for t in task.chain)
    for system, lookup in lookups.items():
        tally = Tally()
        hits = steps = 0
        for task in tasks:
            for i, want in enumerate(task.chain):
                page = lookup(task, task.chain[:i])
                world.observe(tally, task.chain[:i], page)
                hits += want in page.ids
                steps += 1
        blocked = 0 if system == "plain" else sum(not world.sidecar_check(t.chain) for t in multi)
        out[system] = {
            "viable_steps": steps,
            "viable_hits": hits,
            "viable_recall_at_k": round(hits / steps, 4) if steps else None,
            "viable_plans": len(multi),
            "viable_plans_blocked": blocked,
            "viable_steps_on_evicted_tools": evicted_steps,
            "lookups": tally.to_dict(),
            "_tally": tally,
        }
    if "plain" in out:
        out["seed_check"] = dict(out["plain"])
        out["seed_check"]["viable_plans_blocked"] = (
            sum(not seed_check(world.seed, t.chain)[0] for t in multi) if world.seed else 0
        )
    return out


def build_world(corpus: Corpus, sc: Sidecar, embedder: CachedEmbedder, k: int, seed: int) -> World:
    history, successors = split(corpus.tasks, seed)
    results = sc.report_many([report_line(t, corpus.name) for t in history])
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    archived = [
        t
        for t, r in zip(history, results, strict=True)
        if t.outcome == "abandoned" and r.status == "archived"
    ]
    constraints = sorted(
        [c for c in sc.rules.sequences.chains() if not c.lifted], key=lambda c: c.order
    )
    fatal = FatalSequences(t.chain for t in archived)
    if {c.sequence for c in constraints} != set(fatal.sequences):
        raise AssertionError("the sidecar's constraints differ from the archived chains")
    world = World(
        corpus=corpus,
        k=k,
        history=history,
        successors=successors,
        archived=archived,
        fatal=fatal,
        evicted={d.tool_id for d in sc.decide() if d.action == "evict"},
        seed=(
            seed_archive((c.sequence, c.signature, c.rule) for c in constraints)
            if constraints
            else None
        ),
        schema_tokens={
            t.tool_id: embedder.tokenizer_count(mcp_schema_text(t)) for t in corpus.tools
        },
        sidecar_check=lambda plan: sc.check(list(plan)).safe,
    )
    world.info = {
        "split": {
            "history_tasks": len(history),
            "successor_tasks": len(successors),
            "history_abandoned": sum(t.outcome == "abandoned" for t in history),
            "history_completed": sum(t.outcome == "completed" for t in history),
        },
        "intake": statuses,
        "archived_chains": len(constraints),
        "fatal_sequences": len(fatal),
    }
    return world


def run_phase(world: World, lookups: dict[str, Lookup], into: dict[str, dict[str, Any]]) -> None:
    """Re-assembly (archived tasks, then held-out ones) and collateral for ``lookups``."""
    heldout_tasks = [
        t
        for t in world.successors
        if t.outcome == "abandoned" and world.fatal.first_in(t.chain) is not None
    ]
    viable = [t for t in world.successors if t.outcome == "completed" and t.chain]
    main = reassembly(world, world.archived, lookups)
    heldout = reassembly(world, heldout_tasks, lookups)
    side = collateral(world, viable, lookups)
    for s in main:
        r, c = main[s], side[s]
        everything: Tally = r["_tally"].add(c["_tally"])
        into[s] = {
            "reassembly_rate": r["reassembly_rate"],
            "doomed_prefix_calls": r["doomed_prefix_calls"],
            "fatal_exposure": r["lookups"]["fatal_exposure"],
            "dead_prefix_exposure": r["lookups"]["dead_prefix_exposure"],
            "viable_recall_at_k": c["viable_recall_at_k"],
            "context_tokens_per_lookup": everything.to_dict()["context_tokens_per_lookup"],
            "reassembly": {key: v for key, v in r.items() if not key.startswith("_")},
            "collateral": {key: v for key, v in c.items() if not key.startswith("_")},
            "all_lookups": everything.to_dict(),
            "heldout_reassembly": {
                "successors": heldout[s]["successors"],
                "reassembled": heldout[s]["reassembled"],
                "reassembly_rate": heldout[s]["reassembly_rate"],
            },
        }


def rebuild_disagreement(
    corpus: Corpus, embedder: CachedEmbedder, k: int, pages: dict[str, Page]
) -> dict[str, Any]:
    """Build the same catalog, with the same vectors, in a second home and count the
    plain top-k pages it answers differently: why every system shares one index."""
    with tempfile.TemporaryDirectory(prefix="bench-pollution-rebuild-") as tmp:
        other = open_sidecar(Path(tmp), embedder)
        try:
            other.add_tools(corpus.tools)
            differ = sum(
                tuple(h.id for h in other.index.search(embedder.query(q), k)) != page.ids
                for q, page in pages.items()
            )
        finally:
            other.close()
    return {"queries": len(pages), "pages_that_differ": differ}


def tokens(*reports: Any) -> int:
    """Schema tokens reclaimed by successive evictions."""
    return sum(int(r.reclaimed.get("schema_tokens", 0)) for r in reports)


def evaluate(
    corpus: Corpus, embedder: CachedEmbedder, k: int, seed: int, rebuild_check: bool = False
) -> dict[str, Any]:
    started = time.perf_counter()
    queries = sorted({t.query for t in corpus.tasks})
    progress(f"{corpus.name} seed {seed}: embedding {len(queries)} task texts")
    for q in queries:
        embedder.query(q)
    systems: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix=f"bench-pollution-{corpus.name}-") as tmp:
        sc = open_sidecar(Path(tmp), embedder)
        try:
            progress(f"{corpus.name} seed {seed}: indexing {len(corpus.tools)} tools")
            sc.add_tools(corpus.tools)
            indexed = time.perf_counter()
            world = build_world(corpus, sc, embedder, k, seed)
            lookups = Lookups(sc, embedder, k)
            progress(
                f"{corpus.name} seed {seed}: {len(world.archived)} archived tasks; "
                "plain and constraints_only"
            )
            run_phase(world, {"plain": lookups.plain, "constraints_only": lookups.sidecar}, systems)
            strict = sc.evict(min_chains=3)
            progress(f"{corpus.name} seed {seed}: evict_3chains ({len(strict.evicted)} evicted)")
            run_phase(world, {"evict_3chains": lookups.sidecar}, systems)
            report = sc.evict()  # the default policy, on top of the stricter one
            evicted = {d.tool_id for d in (*strict.evicted, *report.evicted)}
            if evicted != world.evicted:
                raise AssertionError("the eviction differs from its dry-run decision")
            progress(f"{corpus.name} seed {seed}: sidecar ({len(evicted)} tools evicted)")
            run_phase(world, {"sidecar": lookups.sidecar}, systems)
            # the looser policy evicts a superset, so it runs last on the same index
            loose = sc.evict(min_chains=1)
            progress(
                f"{corpus.name} seed {seed}: evict_1chain "
                f"({len(evicted) + len(loose.evicted)} tools evicted)"
            )
            run_phase(world, {"evict_1chain": lookups.sidecar}, systems)
            rebuild = (
                rebuild_disagreement(corpus, embedder, k, lookups.plain_pages())
                if rebuild_check
                else None
            )
        finally:
            sc.close()
    return {
        "catalog_tools": len(corpus.tools),
        "tasks": len(corpus.tasks),
        "parsing": dict(sorted(corpus.notes.items())),
        **world.info,
        "eviction": _eviction(evicted, strict, report, loose),
        "timings_s": {
            "index": round(indexed - started, 1),
            "protocol": round(time.perf_counter() - indexed, 1),
        },
        "hnsw_rebuild": rebuild,
        "systems": {s: systems[s] for s in SYSTEMS},
        "ablations": {s: systems[s] for s in ABLATIONS},
    }


def _eviction(evicted: set[str], strict: Any, report: Any, loose: Any) -> dict[str, Any]:
    """What the default policy (``report``, on top of ``strict``) and the looser one
    (``loose``, on top of both) evicted and reclaimed."""
    return {
        "evicted_tools": len(evicted),
        "kept_with_constraint": len(report.kept),
        "reclaimed_schema_tokens": tokens(strict, report),
        "reclaimed_schema_bytes": strict.reclaimed.get("schema_bytes", 0)
        + report.reclaimed.get("schema_bytes", 0),
        "tokenizer": report.reclaimed.get("tokenizer"),
        "duration_s": round(strict.duration_s + report.duration_s, 2),
        "evict_3chains_evicted_tools": len(strict.evicted),
        "evict_3chains_reclaimed_schema_tokens": tokens(strict),
        "evict_1chain_evicted_tools": len(evicted) + len(loose.evicted),
        "evict_1chain_reclaimed_schema_tokens": tokens(strict, report, loose),
    }


def corpus_targets(name: str, systems: dict[str, Any]) -> list[dict[str, Any]]:
    plain, side = systems["plain"], systems["sidecar"]
    out = []
    for metric in ("reassembly_rate", "fatal_exposure"):
        applies = plain[metric] > 0
        out.append(
            target(
                f"{name}: sidecar {metric}",
                "0 where plain > 0",
                {"sidecar": side[metric], "plain": plain[metric]},
                side[metric] == 0 if applies else None,
                "" if applies else "plain is 0 here: nothing to prevent",
            )
        )
    rel = (
        ratio(side["viable_recall_at_k"], plain["viable_recall_at_k"], 4)
        if plain["viable_recall_at_k"]
        else None
    )
    out.append(
        target(
            f"{name}: sidecar viable_recall_at_k / plain",
            ">= 0.99",
            {
                "ratio": rel,
                "sidecar": side["viable_recall_at_k"],
                "plain": plain["viable_recall_at_k"],
            },
            rel is not None and rel >= 0.99,
        )
    )
    return out


def across_seeds(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Each system's headline metrics per seed, with min / mean / max."""
    out: dict[str, Any] = {}
    for s in (*SYSTEMS, *ABLATIONS):
        metrics: dict[str, Any] = {}
        for m in (*HEADLINE, "viable_recall_vs_plain"):
            values = []
            for block in per_seed.values():
                system = (block["systems"] | block["ablations"])[s]
                if m == "viable_recall_vs_plain":
                    plain = block["systems"]["plain"]["viable_recall_at_k"]
                    values.append(round(system["viable_recall_at_k"] / plain, 4) if plain else None)
                else:
                    values.append(system[m])
            known = [v for v in values if v is not None]
            metrics[m] = {
                "per_seed": dict(zip(map(str, per_seed), values, strict=True)),
                "min": min(known) if known else None,
                "mean": round(sum(known) / len(known), 4) if known else None,
                "max": max(known) if known else None,
            }
        out[s] = metrics
    return out


def seed_targets(name: str, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets over every seed: met only if met at each seed where they apply."""
    side, plain = summary["sidecar"], summary["plain"]
    seeds = list(plain["reassembly_rate"]["per_seed"])
    out = []
    for metric in ("reassembly_rate", "fatal_exposure"):
        applies = [x for x in seeds if plain[metric]["per_seed"][x] > 0]
        ok = [x for x in applies if side[metric]["per_seed"][x] == 0]
        out.append(
            target(
                f"{name}: sidecar {metric}, {len(seeds)} seeds",
                "0 where plain > 0, at every seed",
                f"0 at {len(ok)}/{len(applies)} seeds where plain > 0 "
                f"(sidecar max {side[metric]['max']}, plain {plain[metric]['min']}"
                f"-{plain[metric]['max']})",
                len(ok) == len(applies) if applies else None,
            )
        )
    rel = side["viable_recall_vs_plain"]
    met = sum(1 for v in rel["per_seed"].values() if v is not None and v >= 0.99)
    out.append(
        target(
            f"{name}: sidecar viable_recall_at_k / plain, {len(seeds)} seeds",
            ">= 0.99 at every seed",
            f"met at {met}/{len(seeds)} seeds; min {rel['min']}, mean {rel['mean']}, "
            f"max {rel['max']}",
            met == len(seeds),
        )
    )
    return out


def run(
    quick: bool,
    dataset: Path = DEFAULT_DATASETS,
    k: int = 5,
    seed: int = 7,
    seeds: int | None = None,
    embedder_name: str = "onnx",
) -> dict[str, Any]:
    """``seeds`` protocol seeds from ``seed`` on (default: 1 quick, 5 full); the headline
    tables are those of ``seed``.  ``embedder_name``: ``onnx``, the sidecar's default
    (fp32 documents, int8 queries), or ``torch``, the reference."""
    started = time.perf_counter()
    seed_list = [seed + i for i in range(seeds or (1 if quick else FULL_SEEDS))]
    embedder = CachedEmbedder(model_embedder(embedder_name))
    tb = toolbench(dataset)
    per_seed: dict[str, dict[int, dict[str, Any]]] = {"toolbench": {}, "seal_tools": {}}
    for s in steps("pollution: seeds", seed_list):
        per_seed["toolbench"][s] = evaluate(tb, embedder, k, s, rebuild_check=s == seed)
        seal = seal_tools(dataset, s, **(QUICK_SEAL if quick else {}))
        per_seed["seal_tools"][s] = evaluate(seal, embedder, k, s, rebuild_check=s == seed)
    real, scale = per_seed["toolbench"][seed], per_seed["seal_tools"][seed]
    targets = corpus_targets("toolbench", real["systems"]) + corpus_targets(
        "seal_tools", scale["systems"]
    )
    spread = {name: across_seeds(blocks) for name, blocks in per_seed.items()}
    if len(seed_list) > 1:
        targets += seed_targets("toolbench", spread["toolbench"])
        targets += seed_targets("seal_tools", spread["seal_tools"])
    return {
        "benchmark": "pollution",
        "question": "do successors re-assemble abandoned chains (plain vs seed check vs "
        "sidecar), at what recall and context cost?",
        "machine": machine(),
        "params": {
            "k": k,
            "seed": seed,
            "seeds": seed_list,
            "dataset": str(dataset),
            "embedder": f"all-MiniLM-L6-v2 ({embedder_name})",
            "seal_tools": (
                {"abandoned_share": 0.3, **QUICK_SEAL} if quick else {"abandoned_share": 0.3}
            ),
        },
        "systems": real["systems"],
        "toolbench": real,
        "scale": {"seal_tools": scale},
        "across_seeds": spread,
        "targets": targets,
        "timings_s": {
            "embedding": round(embedder.embed_seconds, 1),
            "total": round(time.perf_counter() - started, 1),
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASETS)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--seeds", type=int, help="protocol seeds (default 1 quick, 5 full)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--embedder", choices=("onnx", "torch"), default="onnx")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    emit(run(args.quick, args.dataset, args.k, args.seed, args.seeds, args.embedder), args.out)


if __name__ == "__main__":
    main()
