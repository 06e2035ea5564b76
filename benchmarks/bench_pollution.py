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
import random
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from benchmarks.common import DEFAULT_DATASETS, model_embedder, open_sidecar
from benchmarks.datasets import Corpus, Task, seal_tools, toolbench
from benchmarks.harness.progress import progress
from benchmarks.harness.results import (
    emit,
    machine,
    md_table,
    md_targets,
    pyplot,
    save_figure,
    target,
)
from benchmarks.harness.timing import ratio
from benchmarks.seed import ChainArchive, seed_archive, seed_check

if TYPE_CHECKING:
    import numpy as np

    from indexes import Embedder
    from sidecar import Sidecar, Tool

SYSTEMS = ("plain", "seed_check", "sidecar")
ABLATIONS = ("constraints_only", "evict_3chains", "evict_1chain")
"""``constraints_only``: the sidecar's archive and constraint-aware lookup without the
eviction, to tell what the eviction costs from what the constraints cost.
``evict_3chains`` and ``evict_1chain``: the stricter and the looser policy,
``evict(min_chains=3)`` and ``evict(min_chains=1)``, around the default of 2 (1 was the
library's default before these measurements)."""
QUICK_SEAL = {"max_tasks": 600, "max_tools": 1500}
FULL_SEEDS = 5


# ---- the embedder, once per text ---------------------------------------------------
class CachedEmbedder:
    """The real model behind a per-text cache, so that the two homes and the queries
    share one embedding pass; it is the same model under the same name."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self._cache: dict[str, np.ndarray] = {}
        self._queries: dict[str, np.ndarray] = {}
        self.embed_seconds = 0.0

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dim(self) -> int:
        return self._inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            start = time.perf_counter()
            vectors = self._inner.embed(missing)
            self.embed_seconds += time.perf_counter() - start
            self._cache.update(zip(missing, vectors, strict=True))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])

    def query(self, text: str) -> np.ndarray:
        """A query's vector as the sidecar computes it (the fast path's query graph)."""
        from indexes import query_vector

        if text not in self._queries:
            start = time.perf_counter()
            self._queries[text] = query_vector(self._inner, text)
            self.embed_seconds += time.perf_counter() - start
        return self._queries[text]

    def tokenizer_count(self, text: str) -> int:
        counter: Callable[[str], int] | None = getattr(self._inner, "tokenizer_count", None)
        if counter is None:
            raise TypeError(f"{self._inner.name} has no tokenizer")
        return counter(text)


# ---- the reference: which sequences are fatal ----------------------------------------
class FatalSequences:
    """The archived fatal sequences, matched as contiguous runs (written apart from the
    library's automaton, so that it checks the sidecar rather than repeats it)."""

    def __init__(self, sequences: Iterable[Sequence[str]]) -> None:
        self.sequences = sorted({tuple(s) for s in sequences})
        self._by_terminal: dict[str, list[tuple[str, ...]]] = {}
        for seq in self.sequences:
            self._by_terminal.setdefault(seq[-1], []).append(seq)

    def __len__(self) -> int:
        return len(self.sequences)

    def completes(self, after: Sequence[str], tool: str) -> tuple[str, ...] | None:
        """The fatal sequence that ``after + [tool]`` ends with, if any."""
        for seq in self._by_terminal.get(tool, ()):
            n = len(seq) - 1
            if len(after) >= n and tuple(after[len(after) - n :]) == seq[:-1]:
                return seq
        return None

    def first_in(self, plan: Sequence[str]) -> tuple[str, ...] | None:
        for end in range(len(plan)):
            seq = self.completes(plan[:end], plan[end])
            if seq is not None:
                return seq
        return None


# ---- one lookup, as the agent sees it --------------------------------------------------
@dataclass(frozen=True)
class Page:
    ids: tuple[str, ...]
    warning_tokens: int = 0
    withheld: int = 0


@dataclass
class Tally:
    """What a set of lookups handed the agent."""

    lookups: int = 0
    fatal_exposed: int = 0
    dead_exposed: int = 0
    schema_tokens: int = 0
    warning_tokens: int = 0
    withheld: int = 0
    short_pages: int = 0

    def add(self, other: Tally) -> Tally:
        return Tally(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))

    def to_dict(self) -> dict[str, Any]:
        n = self.lookups or 1
        return {
            "lookups": self.lookups,
            "fatal_exposure": round(self.fatal_exposed / n, 4),
            "dead_prefix_exposure": round(self.dead_exposed / n, 4),
            "context_tokens_per_lookup": round((self.schema_tokens + self.warning_tokens) / n, 1),
            "schema_tokens_per_lookup": round(self.schema_tokens / n, 1),
            "warning_tokens_per_lookup": round(self.warning_tokens / n, 1),
            "withheld_per_lookup": round(self.withheld / n, 3),
            "pages_shorter_than_k": self.short_pages,
        }


Lookup = Callable[[Task, Sequence[str]], Page]


@dataclass
class World:
    corpus: Corpus
    k: int
    history: list[Task]
    successors: list[Task]
    archived: list[Task]
    fatal: FatalSequences
    evicted: set[str]
    """What the sidecar's eviction removes (decided before any system runs)."""
    seed: ChainArchive | None
    schema_tokens: dict[str, int]
    sidecar_check: Callable[[Sequence[str]], bool]
    info: dict[str, Any] = field(default_factory=dict)

    def observe(self, tally: Tally, after: Sequence[str], page: Page) -> None:
        tally.lookups += 1
        tally.fatal_exposed += any(self.fatal.completes(after, t) for t in page.ids)
        tally.dead_exposed += any(t in self.evicted for t in page.ids)
        tally.schema_tokens += sum(self.schema_tokens[t] for t in page.ids)
        tally.warning_tokens += page.warning_tokens
        tally.withheld += page.withheld
        tally.short_pages += len(page.ids) < self.k


# ---- the protocol ------------------------------------------------------------------------
def split(tasks: Sequence[Task], seed: int) -> tuple[list[Task], list[Task]]:
    """History and successor halves, by task id (a duplicated id stays on one side)."""
    ids = sorted({t.task_id for t in tasks})
    random.Random(f"split:{seed}").shuffle(ids)
    history_ids = set(ids[: len(ids) // 2])
    return (
        [t for t in tasks if t.task_id in history_ids],
        [t for t in tasks if t.task_id not in history_ids],
    )


def report_line(task: Task, corpus: str) -> dict[str, Any]:
    from sidecar.classify import classify

    session = f"{corpus}:{task.source}:{task.task_id}"
    if task.outcome == "completed":
        return {"topology": list(task.chain), "outcome": "completed", "session_id": session}
    # an explicit kind only where the classification table has no answer (the protocol's
    # rule); a transient-looking signature is left to the sidecar, which will keep it out
    kind = "deterministic" if classify(task.signature).kind == "unknown" else None
    prefix = " > ".join(task.chain[:-1])
    rule = (
        f"after {prefix}, {task.chain[-1]} ended the task abandoned ({task.reason})"
        if len(task.chain) >= 2
        else ""
    )
    return {
        "topology": list(task.chain),
        "outcome": "abandoned",
        "failure": {"signature": task.signature, "kind": kind},
        "constraint": {"rule": rule},
        "session_id": session,
    }


def mcp_schema_text(tool: Tool) -> str:
    """What an agent is handed for a tool (as the eviction report counts it)."""
    import json

    return json.dumps(
        {"name": tool.tool_id, "description": tool.description, "inputSchema": tool.input_schema}
    )


class Lookups:
    """The two ways to look up in the shared home: the raw index (``plain``: no archive
    consulted) and the sidecar's constraint-aware lookup (whatever has been evicted by
    then)."""

    def __init__(self, sc: Sidecar, embedder: CachedEmbedder, k: int) -> None:
        self._sc, self._embedder, self._k = sc, embedder, k
        self._vectors: dict[str, np.ndarray] = {}
        self._warning_tokens: dict[str, int] = {}
        self._plain: dict[str, Page] = {}

    def _vector(self, query: str) -> np.ndarray:
        if query not in self._vectors:
            self._vectors[query] = self._embedder.query(query)
        return self._vectors[query]

    def plain(self, task: Task, after: Sequence[str]) -> Page:
        page = self._plain.get(task.query)
        if page is None:  # no archive: the executed prefix changes nothing
            hits = self._sc.index.search(self._vector(task.query), self._k)
            page = self._plain[task.query] = Page(tuple(h.id for h in hits))
        return page

    def plain_pages(self) -> dict[str, Page]:
        """The plain pages served so far, by query."""
        return dict(self._plain)

    def sidecar(self, task: Task, after: Sequence[str]) -> Page:
        vector = cast("Sequence[float]", self._vector(task.query))  # an array is fine
        result = self._sc.search_vector(vector, self._k, after=list(after))
        spent = 0
        for hit in result.hits:
            for w in hit.warnings:
                if w not in self._warning_tokens:
                    self._warning_tokens[w] = self._embedder.tokenizer_count(w)
                spent += self._warning_tokens[w]
        return Page(tuple(h.tool_id for h in result.hits), spent, len(result.withheld))


@dataclass
class Walk:
    executed: list[str]
    fatal: tuple[str, ...] | None


def compose(world: World, lookup: Lookup, task: Task, tally: Tally) -> Walk:
    """The successor's chain, one lookup per step of the original chain."""
    executed: list[str] = []
    for want in task.chain:
        page = lookup(task, executed)
        world.observe(tally, executed, page)
        if not page.ids:
            break
        choice = want if want in page.ids else page.ids[0]
        hit = world.fatal.completes(executed, choice)
        executed.append(choice)
        if hit is not None:  # the successor walked into the archived wall
            return Walk(executed, hit)
    return Walk(executed, None)


def replayed_prefix(walk: Walk, chain: Sequence[str]) -> int:
    """Leading steps of the archived chain's prefix that the successor re-ran."""
    n = 0
    while n < len(chain) - 1 and n < len(walk.executed) and walk.executed[n] == chain[n]:
        n += 1
    return n


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
        "eviction": {
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
        },
        "timings_s": {
            "index": round(indexed - started, 1),
            "protocol": round(time.perf_counter() - indexed, 1),
        },
        "hnsw_rebuild": rebuild,
        "systems": {s: systems[s] for s in SYSTEMS},
        "ablations": {s: systems[s] for s in ABLATIONS},
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
    for s in seed_list:
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


# ---- output ------------------------------------------------------------------------------
HEADLINE = (
    "reassembly_rate",
    "doomed_prefix_calls",
    "fatal_exposure",
    "dead_prefix_exposure",
    "viable_recall_at_k",
    "context_tokens_per_lookup",
)


def markdown(result: dict[str, Any]) -> str:
    parts = ["## Retrieval pollution", ""]
    for label, block in (
        ("ToolBench (real trajectories)", result["toolbench"]),
        ("Seal-Tools (scale, synthetic abandonment)", result["scale"]["seal_tools"]),
    ):
        systems = block["systems"] | block["ablations"]
        rows = [
            [s if s in SYSTEMS else f"{s} (ablation)"]
            + [systems[s][m] for m in HEADLINE]
            + [
                systems[s]["reassembly"]["reassembled"],
                systems[s]["reassembly"]["successors"],
                systems[s]["collateral"]["viable_plans_blocked"],
                f"{systems[s]['heldout_reassembly']['reassembled']}"
                f"/{systems[s]['heldout_reassembly']['successors']}",
            ]
            for s in (*SYSTEMS, *ABLATIONS)
        ]
        ev = block["eviction"]
        seed_r = systems["seed_check"]["reassembly"]
        side_all = systems["sidecar"]["all_lookups"]
        notes = (
            f"The seed's check blocked {seed_r['plans_blocked']} of {seed_r['successors']} "
            f"successor plans ({seed_r['plans_blocked_without_fatal_sequence']} of them held "
            f"no fatal sequence) and {systems['seed_check']['collateral']['viable_plans_blocked']}"
            f" of {systems['seed_check']['collateral']['viable_plans']} viable plans; the "
            f"sidecar withheld {side_all['withheld_per_lookup']} tools per lookup and added "
            f"{side_all['warning_tokens_per_lookup']} warning tokens per lookup to "
            f"{side_all['schema_tokens_per_lookup']} schema tokens (plain: "
            f"{systems['plain']['all_lookups']['schema_tokens_per_lookup']})."
        )
        if block.get("hnsw_rebuild"):
            hr = block["hnsw_rebuild"]
            notes += (
                f" A second build of the same catalog with the same vectors answered "
                f"{hr['pages_that_differ']} of {hr['queries']} plain top-{result['params']['k']}"
                " pages differently (Chroma's HNSW build is not deterministic), hence one "
                "shared index for every system."
            )
        parts += [
            f"### {label}",
            "",
            f"{block['catalog_tools']:,} tools, {block['tasks']:,} tasks; "
            f"{block['archived_chains']} chains archived from the history half, "
            f"{ev['evicted_tools']} tools evicted, {ev['kept_with_constraint']} kept with a "
            f"constraint ({ev['reclaimed_schema_tokens']} schema tokens reclaimed); "
            f"`evict_3chains` evicted {ev['evict_3chains_evicted_tools']} "
            f"({ev['evict_3chains_reclaimed_schema_tokens']} tokens), `evict_1chain` "
            f"{ev['evict_1chain_evicted_tools']} ({ev['evict_1chain_reclaimed_schema_tokens']} "
            "tokens).",
            "",
            md_table(
                [
                    "system",
                    *HEADLINE,
                    "re-assembled",
                    "successors",
                    "viable plans blocked",
                    "held-out re-assembled",
                ],
                rows,
            ),
            "",
            notes,
            "",
        ]
    if len(result["params"]["seeds"]) > 1:
        parts += [
            f"### Across seeds {', '.join(map(str, result['params']['seeds']))} (min / mean / max)",
            "",
        ]
        for name, spread in result["across_seeds"].items():
            rows = [
                [name, s]
                + [
                    f"{spread[s][m]['min']} / {spread[s][m]['mean']} / {spread[s][m]['max']}"
                    for m in (*HEADLINE[:3], "viable_recall_vs_plain")
                ]
                for s in (*SYSTEMS, *ABLATIONS)
            ]
            parts += [
                md_table(["dataset", "system", *HEADLINE[:3], "viable recall / plain"], rows),
                "",
            ]
    parts += ["### Targets", "", md_targets(result["targets"]), ""]
    return "\n".join(parts)


METRIC_LABELS = (
    "re-assembly\nrate",
    "fatal\nexposure",
    "dead-prefix\nexposure",
    "viable\nrecall@k",
)


def plot(result: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    blocks = [("ToolBench", result["toolbench"]), ("Seal-Tools", result["scale"]["seal_tools"])]
    metrics = ("reassembly_rate", "fatal_exposure", "dead_prefix_exposure", "viable_recall_at_k")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    width = 0.26
    for ax, (title, block) in zip(axes[:2], blocks, strict=True):
        for i, s in enumerate(SYSTEMS):
            values = [block["systems"][s][m] or 0 for m in metrics]
            xs = [j + (i - 1) * width for j in range(len(metrics))]
            ax.bar(xs, values, width, label=s)
        ax.set_xticks(range(len(metrics)), METRIC_LABELS, fontsize=8)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{title} (k={result['params']['k']})")
        ax.legend(fontsize=8)
    ax = axes[2]
    for i, s in enumerate(SYSTEMS):
        values = [b["systems"][s]["context_tokens_per_lookup"] for _, b in blocks]
        ax.bar([j + (i - 1) * width for j in range(len(blocks))], values, width, label=s)
    ax.set_xticks(range(len(blocks)), [t for t, _ in blocks])
    ax.set_ylabel("schema + warning tokens per lookup")
    ax.set_title("context handed to the agent")
    ax.legend(fontsize=8)
    return [save_figure(plt, fig, out_dir / "pollution.png")]


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
