"""How a lookup orders the active tools: the pieces of the hybrid ranking.

A lookup ranks the tools several ways and fuses the rankings by reciprocal rank fusion
(RRF): a tool at rank ``r`` (from 1) of a ranking adds ``weight / (RRF_K + r)`` to its
score.  RRF needs no calibration between BM25 scores and cosine similarities, which
live on unrelated scales, and one ranking that misses a tool cannot bury it.  The
rankings:

- **dense**: cosine similarity to the query's views (:func:`query_views`: each of its
  sentences, or the whole query when it has only one), a tool scoring the best of its
  similarities (max-sim), so that a request with several parts finds the tool of each
  part;
- **lexical**: BM25 over the same text (:mod:`indexes.lexical`);
- **chain**: with an executed prefix, the tools that followed that prefix in completed
  chains (:func:`successors`), most often first, with weight ``chain_weight``.  Only a
  text lookup has it: beside the dense ranking alone (a lookup by vector) it weighs as
  much as the whole query, and on Seal-Tools, whose chains rarely repeat, it cost the
  pollution benchmark's viable recall 1.4-2.2% of plain's even at half weight.

``benchmarks/bench_retrieval.py`` measured the weights and depth below on
StableToolBench, Seal-Tools and ToolBench; BENCHMARKS.md has the figures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

RRF_K = 60
"""The rank offset of reciprocal rank fusion (the value of its original study): it
keeps the first few ranks of any one ranking from dominating."""
DEPTH = 50
"""How deep each ranking is read, beyond the ``k`` hits and the excluded tools."""
MAX_VIEWS = 8
"""Views of one query, at most (the sentences past the seventh share the last)."""

# sentence ends: ASCII ones before a space; the ideographic full stop and the
# full-width ! ? ; (U+3002, U+FF01, U+FF1F, U+FF1B) with or without one
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n+|(?<=[\u3002\uff01\uff1f\uff1b])\s*")
_MIN_SENTENCE_BYTES = 12


def query_views(text: str, max_views: int = MAX_VIEWS) -> list[str]:
    """The texts embedded for a query: each of its sentences when it has several (short
    fragments stay with their neighbours), else the whole query.

    The whole query is not a view of its own beside its sentences: on the three
    protocols of ``benchmarks/bench_retrieval.py`` adding it gained at most 0.6 points
    of nDCG@5 and doubled the embedding work of a long query."""
    whole = text.strip()
    parts = [p.strip() for p in _SENTENCE_END.split(whole)]
    # counted in UTF-8 bytes: four ideographs weigh as much as twelve Latin letters
    parts = [p for p in parts if len(p.encode("utf-8")) >= _MIN_SENTENCE_BYTES]
    if len(parts) < 2:
        return [whole]
    if len(parts) > max_views:  # the rest in the last view
        parts = [*parts[: max_views - 1], " ".join(parts[max_views - 1 :])]
    return parts


def fuse(
    rankings: Sequence[tuple[Sequence[str], float]],
    tiebreak: Mapping[str, float] | None = None,
) -> list[str]:
    """Every id of ``rankings`` (each an ordered list of ids and a weight), best fused
    score first.  Equal scores fall back on ``tiebreak`` (higher first), then on the id,
    so the order is a function of the rankings alone."""
    score: dict[str, float] = {}
    for ids, weight in rankings:
        if weight <= 0:
            continue
        for rank, rid in enumerate(ids, start=1):
            score[rid] = score.get(rid, 0.0) + weight / (RRF_K + rank)
    extra = tiebreak or {}
    return sorted(score, key=lambda rid: (-score[rid], -extra.get(rid, 0.0), rid))


def successors(
    chains: Iterable[tuple[Sequence[str], int]], executed: Sequence[str], n: int = DEPTH
) -> list[str]:
    """The tools that came after ``executed`` in completed ``chains`` (each a topology
    and how many runs completed it), most runs first.

    A chain counts where it contains the executed tools' longest possible tail as a
    contiguous run (the whole prefix when some chain has it); the tools after that run
    are its successors, the next one weighing most.  Tools already executed are left
    out: a lookup after them asks for what comes next."""
    if not executed:
        return []
    chains = list(chains)
    done = set(executed)
    for length in range(len(executed), 0, -1):
        tail = tuple(executed[-length:])
        found: dict[str, float] = {}
        for topology, runs in chains:
            for start in range(len(topology) - length + 1):
                if tuple(topology[start : start + length]) == tail:
                    for dist, tool in enumerate(topology[start + length :], start=1):
                        if tool not in done:
                            found[tool] = found.get(tool, 0.0) + runs / dist
                    break
        if found:
            return [t for t, _ in sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))][:n]
    return []
