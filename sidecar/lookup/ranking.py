"""How a lookup orders the active tools: the pieces of the hybrid ranking.

A lookup scores each candidate tool several ways and adds the scores, each divided by
its *spread* (its standard deviation over the whole catalog for this query) and
weighed (:func:`fuse`, :func:`hybrid_ranked`)::

    fused = DENSE_WEIGHT * dense / dense spread + LEXICAL_WEIGHT * bm25 / bm25 spread
            + usage + chain_weight * chain

- **dense**: cosine similarity to the query's views (:func:`query_views`: each of its
  sentences, or the whole query when it has only one), a tool scoring the best of its
  similarities (max-sim), so that a request with several parts finds the tool of each
  part;
- **lexical**: BM25 over the same text (:mod:`indexes.lexical`);
- **usage**: what finished sessions taught (:mod:`indexes.usage`): a boost, already in
  dense spreads, for tools whose completed requests match the query better than their
  own text does, and a penalty near requests their sessions were abandoned on;
- **chain**: with an executed prefix, the tools that followed that prefix in completed
  chains (:func:`successors`), the ``r``-th scoring ``(RRF_K + 1) / (RRF_K + r)``, with
  weight ``chain_weight``.  Only a text lookup has it: beside the dense ranking alone (a
  lookup by vector) it weighs as much as the whole query, and on Seal-Tools, whose
  chains rarely repeat, it cost the pollution benchmark's viable recall.

Why spreads: BM25 scores and cosine similarities live on unrelated scales, and their
scales move from query to query (a query whose rare word one tool's name holds gives
that tool a BM25 score far above every other's; a query of common words gives many tools
middling ones).  Dividing by the spread weighs each ranker by how far its candidate
stands out from the catalog *for this query*: BM25 decides where it is sure, the dense
similarity elsewhere.  Reciprocal rank fusion, which the ranking used before, gives
BM25's first tool the same pull whatever its margin, and on single-tool requests it put
keyword matches above the right tool.  The weights were chosen on StableToolBench alone
and hold, unretuned, on Seal-Tools, ToolBench and APIBench (``benchmarks/
bench_retrieval.py``; BENCHMARKS.md, section 11, has the figures).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from indexes import ActiveIndex, LexicalScores, UsageBoost, UsageIndex

RRF_K = 60
"""The rank offset of a ranking without scores (the value of reciprocal rank fusion's
original study): the first few ranks of it do not dominate."""
DENSE_WEIGHT = 0.7
LEXICAL_WEIGHT = 0.3
"""The weights of the dense similarity and of BM25, each per spread."""
DENSE_SPREAD = 0.08
"""The dense similarity's spread when the catalog's is not known (Chroma ranked the
lookup, seeing only the nearest tools): its median over the queries of four catalogs,
whose middle 80% lie within 0.065-0.095."""
USAGE_WEIGHT = 1.0
"""The weight of the usage boosts (:mod:`indexes.usage` sets their scale)."""
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


@dataclass(frozen=True)
class Signal:
    """One ranker's scores of candidate tools: each adds ``weight * score / spread`` to
    the tool's fused score (a tool it does not score adds nothing)."""

    scores: Mapping[str, float]
    weight: float = 1.0
    spread: float = 1.0


def ranked_signal(ids: Sequence[str], weight: float) -> Signal:
    """A ranking without scores as a signal: its ``r``-th id scores
    ``(RRF_K + 1) / (RRF_K + r)``, the first one 1."""
    scores: dict[str, float] = {}
    for rank, rid in enumerate(ids, start=1):
        scores.setdefault(rid, (RRF_K + 1) / (RRF_K + rank))
    return Signal(scores, weight)


def fuse(
    signals: Sequence[Signal | tuple[Sequence[str], float]],
    tiebreak: Mapping[str, float] | None = None,
) -> list[str]:
    """Every id of ``signals``, best fused score first.  A signal is a :class:`Signal`
    or a ranking without scores and its weight (:func:`ranked_signal`: rankings alone
    fuse as reciprocal rank fusion does).  Equal scores fall back on ``tiebreak``
    (higher first), then on the id, so the order is a function of the signals alone."""
    score: dict[str, float] = {}
    for signal in signals:
        if not isinstance(signal, Signal):
            signal = ranked_signal(*signal)
        if signal.weight <= 0 or signal.spread <= 0:
            continue
        scale = signal.weight / signal.spread
        for rid, value in signal.scores.items():
            score[rid] = score.get(rid, 0.0) + scale * value
    extra = tiebreak or {}
    return sorted(score, key=lambda rid: (-score[rid], -extra.get(rid, 0.0), rid))


@dataclass(frozen=True)
class Fused:
    """A hybrid lookup's answer: the best ``k`` tools not excluded and the excluded ones
    that ranked above the last of them, each with its dense similarity (its best
    view's), and the usage of every candidate usage raised or lowered."""

    hits: list[tuple[str, float]]
    displaced: list[tuple[str, float]]
    usage: dict[str, UsageBoost] = field(default_factory=dict)


def hybrid_ranked(
    index: ActiveIndex,
    vector: np.ndarray,
    text: str | None,
    k: int,
    excluded: Collection[str],
    *,
    usage: UsageIndex | None = None,
    usage_weight: float = USAGE_WEIGHT,
    chains: Sequence[str] = (),
    chain_weight: float = 0.0,
) -> Fused:
    """The hybrid ranking of ``index`` for a query (``vector``: one row per view;
    ``text``: the query, for BM25 and the chains; ``None``: a lookup by vector, ranked
    by the dense similarity and usage alone): the ``k`` best tools not ``excluded``.

    Each ranking is read ``DEPTH`` beyond ``k`` non-excluded tools, excluded ones kept
    in place, so that an exclusion never moves another tool's rank."""
    depth = k + DEPTH
    hits, pushed, spread = index.search_scored(vector, depth, excluded)
    dense = {h.id: h.score for h in hits + pushed}
    lexical = None
    if text is not None:
        lexical = index.lexical_scored(text, depth + len(excluded), include=list(dense))
    order, similarity, boosts = hybrid_order(
        vector,
        dense,
        spread,
        lexical,
        lambda ids: index.similarities(vector, ids),
        usage=usage,
        usage_weight=usage_weight,
        chains=chains if text is not None else (),
        chain_weight=chain_weight,
    )
    chosen: list[tuple[str, float]] = []
    displaced: list[tuple[str, float]] = []
    for rid in order:
        if len(chosen) == k:
            break
        (displaced if rid in excluded else chosen).append((rid, similarity[rid]))
    return Fused(chosen, displaced, boosts)


def hybrid_order(
    views: np.ndarray,
    dense: Mapping[str, float],
    dense_spread: float | None,
    lexical: LexicalScores | None,
    similarity: Callable[[Sequence[str]], Mapping[str, float]],
    *,
    usage: UsageIndex | None = None,
    usage_weight: float = USAGE_WEIGHT,
    chains: Sequence[str] = (),
    chain_weight: float = 0.0,
) -> tuple[list[str], dict[str, float], dict[str, UsageBoost]]:
    """The fused order of every candidate (the tools of ``dense``, ``lexical``, the
    ``chains`` and ``usage``), best first, with each one's dense similarity and the
    usage boosts.  Every candidate is scored by every ranker: the dense similarity of
    those the dense ranking did not reach is asked of ``similarity``, and a candidate
    it does not know (a tool that left the index, or that only the completed chains
    name) is left out, neither served nor reported as withheld."""
    spread = dense_spread or DENSE_SPREAD
    known = dict(dense)
    signals: list[Signal] = []
    if lexical is not None:
        signals.append(
            Signal(dict(lexical.ranked) | lexical.scores, LEXICAL_WEIGHT, lexical.spread)
        )
    if chains and chain_weight > 0:
        signals.append(ranked_signal(chains, chain_weight))
    missing = list(dict.fromkeys(rid for s in signals for rid in s.scores if rid not in known))
    if missing:
        known |= similarity(missing)
    boosts: dict[str, UsageBoost] = {}
    if usage is not None and usage_weight > 0:

        def remembered(ids: Sequence[str]) -> Mapping[str, float]:
            found = similarity(ids)
            known.update(found)
            return found

        # usage weighs in on the candidates of the other rankers: what it costs does not
        # grow with the tools it knows, and no source can put a tool among them
        boosts = usage.boosts(views, dict(known), spread, remembered, candidates=list(known))
        signals.append(Signal({t: b.score for t, b in boosts.items()}, usage_weight))
    signals.insert(0, Signal(known, DENSE_WEIGHT, spread))
    return [rid for rid in fuse(signals, known) if rid in known], known, boosts


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
