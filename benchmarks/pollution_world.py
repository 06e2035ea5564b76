"""The pieces of the pollution benchmark's world: the embedder cache shared by its systems,
the fatal sequences a corpus teaches, the pages and tallies of a phase, the split of a
corpus into history and successors, and the lookups each system makes."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from benchmarks.datasets import Corpus, Task
from benchmarks.seed import ChainArchive

if TYPE_CHECKING:
    import numpy as np

    from indexes import Embedder
    from sidecar import Sidecar, Tool
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from indexes import Embedder
    from sidecar import Sidecar, Tool


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


Lookup = Callable[[Task, Sequence[str]], Page]
"""One system's lookup: a task and its executed prefix to the page it is shown."""


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
