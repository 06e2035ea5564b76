"""The rankers of ``bench_retrieval``: every one ranks a whole catalog with the sidecar's
own pieces (documents as the sidecar embeds them, through the fp32 ONNX graph; queries
through its int8 query graph; :mod:`indexes.lexical` for BM25; :mod:`sidecar.lookup.ranking`
for the views and the fusion; :mod:`indexes.usage` for usage), in numpy over the whole
catalog instead of through Chroma, so that a protocol of a thousand queries takes
seconds.  :meth:`Engine.hybrid` is the lookup's own fusion
(:func:`sidecar.lookup.ranking.hybrid_order`, the function
:func:`sidecar.lookup.ranking.hybrid_ranked` runs over a real index);
``bench_retrieval`` checks that the two agree.

The fusion candidates the benchmark compares (:data:`FUSIONS`), each over the same three
signals (the dense similarity over the query's views, the whole query's, BM25):

- ``rrf``: reciprocal rank fusion of the views' ranking and BM25 (k = 60): the fusion
  before this one;
- ``rrf (agreement)``: the same, BM25's weight 0.5 + the share of its top 10 that the
  dense top 10 holds (the rankers agreeing, BM25 counts more);
- ``rrf, whole query re-ranks disagreements``: where the two first tools differ, the
  union of both top 5 re-ranked by the whole query's similarity (the only other model);
- ``min-max a``: ``a`` x the dense similarity scaled to [0, 1] over its top 55 +
  ``(1 - a)`` x BM25 over its best score;
- ``spread a``: ``a`` x dense / its spread + ``(1 - a)`` x BM25 / its spread, each
  spread the standard deviation over the catalog for the query (the sidecar's fusion,
  ``a`` = :data:`sidecar.lookup.ranking.DENSE_WEIGHT`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from benchmarks.retrieval_data import Protocol

if TYPE_CHECKING:
    import numpy as np

    from indexes import UsageIndex
    from indexes.lexical import LexicalSnapshot

K = 5
DEPTH = K + 50
"""How deep each ranking is read: as deep as a lookup of ``k`` = 5 reads it
(``k + sidecar.lookup.ranking.DEPTH``)."""
ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9)


class Signals:
    """One query against one catalog: its views' vectors, the dense similarity of every
    tool (best view; and the whole query's), BM25 of every tool."""

    def __init__(self, engine: Engine, text: str) -> None:
        import numpy as np

        from indexes.lexical import terms

        self.text = text
        self.views = engine.views(text)
        self.dense = (engine.matrix @ self.views.T).max(axis=1)
        self.whole = engine.matrix @ engine.views(text, whole=True)[0]
        self.bm25 = np.zeros(len(engine.ids), dtype=np.float32)
        self.terms = terms(text)
        self.bm25[engine.lexical_rows] = engine.lexical.scores(self.terms)


class Engine:
    """One catalog: its document vectors, its BM25 index, and the query vectors seen
    (``vectors``, shared between engines: a query's vectors do not depend on the
    catalog)."""

    def __init__(
        self,
        protocol: Protocol,
        embedder: Any,
        vectors: dict[str, np.ndarray],
        texts: Sequence[str] | None = None,
        lexical: Sequence[str] | None = None,
        matrix: np.ndarray | None = None,
    ) -> None:
        """``texts``: what is embedded for each tool (the protocol's by default, or
        ``matrix`` already embedded); ``lexical``: what BM25 indexes (the protocol's)."""
        import numpy as np

        from indexes.lexical import LexicalSnapshot, terms

        self.protocol = protocol
        self.ids = protocol.ids
        self.position = {t: i for i, t in enumerate(self.ids)}
        self.embedder = embedder
        self.vectors = vectors
        started = time.perf_counter()
        self.matrix = (
            matrix if matrix is not None else embedder.embed(list(texts or protocol.texts))
        )
        self.embed_s = time.perf_counter() - started
        words = list(lexical or protocol.lexical or protocol.texts)
        # rows in id order, as the lexical tier builds them: BM25 ties break alike
        order = sorted(range(len(self.ids)), key=self.ids.__getitem__)
        self.lexical: LexicalSnapshot = LexicalSnapshot.build(
            [self.ids[i] for i in order], [terms(words[i]) for i in order]
        )
        self.lexical_rows = np.array(order, dtype=np.int64)

    def views(self, text: str, whole: bool = False) -> np.ndarray:
        """The query's views (its sentences), or its whole text alone."""
        import numpy as np

        from sidecar.lookup.ranking import query_views

        rows = []
        for view in [text.strip()] if whole else query_views(text):
            if view not in self.vectors:
                self.vectors[view] = self.embedder.embed_query(view)
            rows.append(self.vectors[view])
        return np.stack(rows)

    def signals(self, text: str) -> Signals:
        return Signals(self, text)

    def top(self, scores: np.ndarray, n: int = DEPTH, positive: bool = False) -> list[str]:
        import numpy as np

        rows = np.flatnonzero(scores > 0) if positive else np.arange(len(scores))
        n = min(n, len(rows))
        if n <= 0:
            return []
        best = rows[np.argpartition(-scores[rows], n - 1)[:n]]
        return [self.ids[i] for i in best[np.lexsort((best, -scores[best]))]]

    def similarity(self, sig: Signals) -> Callable[[Sequence[str]], dict[str, float]]:
        return lambda ids: {t: float(sig.dense[self.position[t]]) for t in ids}

    def hybrid(
        self,
        sig: Signals,
        usage: UsageIndex | None = None,
        chains: Sequence[str] = (),
        chain_weight: float = 0.0,
    ) -> tuple[list[str], dict[str, Any]]:
        """The lookup's hybrid order (:func:`sidecar.lookup.ranking.hybrid_order`) over the
        same candidates a lookup of ``k`` = 5 reads, and the usage boosts."""
        from sidecar.lookup.ranking import hybrid_order

        dense = {t: float(sig.dense[self.position[t]]) for t in self.top(sig.dense)}
        # the lexical tier's own scoring: its top, the dense candidates' scores, the spread
        lexical = self.lexical.scored(sig.terms, DEPTH, (), list(dense))
        order, _, boosts = hybrid_order(
            sig.views,
            dense,
            float(sig.dense.std()),
            lexical,
            self.similarity(sig),
            usage=usage,
            chains=chains,
            chain_weight=chain_weight,
        )
        return order, boosts


# ---- the fusion candidates ------------------------------------------------------------
def _rrf(engine: Engine, sig: Signals, bm25_weight: float = 1.0) -> list[str]:
    from sidecar.lookup.ranking import fuse

    tiebreak = {t: float(sig.dense[engine.position[t]]) for t in engine.top(sig.dense)}
    return fuse(
        [(engine.top(sig.dense), 1.0), (engine.top(sig.bm25, positive=True), bm25_weight)],
        tiebreak,
    )


def _agreement(engine: Engine, sig: Signals) -> list[str]:
    dense, bm25 = engine.top(sig.dense, 10), engine.top(sig.bm25, 10, positive=True)
    return _rrf(engine, sig, 0.5 + len(set(dense) & set(bm25)) / 10)


def _rerank(engine: Engine, sig: Signals) -> list[str]:
    order = _rrf(engine, sig)
    dense, bm25 = engine.top(sig.dense, K), engine.top(sig.bm25, K, positive=True)
    if not bm25 or dense[0] == bm25[0]:
        return order
    pool = set(dense) | set(bm25)
    head = sorted(pool, key=lambda t: (-float(sig.whole[engine.position[t]]), t))
    return head + [t for t in order if t not in pool]


def _minmax(engine: Engine, sig: Signals, alpha: float) -> list[str]:
    import numpy as np

    dense = sig.dense
    low = float(np.partition(dense, len(dense) - DEPTH)[-DEPTH]) if len(dense) > DEPTH else 0.0
    high = float(dense.max())
    scaled = np.clip((dense - low) / (high - low), 0, None) if high > low else dense * 0
    best = float(sig.bm25.max())
    bm25 = sig.bm25 / best if best > 0 else sig.bm25
    return engine.top(alpha * scaled + (1 - alpha) * bm25)


def _spread(engine: Engine, sig: Signals, alpha: float) -> list[str]:
    spread_b = float(sig.bm25.std())
    bm25 = sig.bm25 / spread_b if spread_b > 0 else sig.bm25 * 0
    return engine.top(alpha * sig.dense / float(sig.dense.std()) + (1 - alpha) * bm25)


FUSIONS: dict[str, Callable[[Engine, Signals], list[str]]] = {
    "rrf": _rrf,
    "rrf (agreement)": _agreement,
    "rrf, whole query re-ranks disagreements": _rerank,
    **{f"min-max {a:g}": partial(_minmax, alpha=a) for a in (0.5, 0.7)},
    **{f"spread {a:g}": partial(_spread, alpha=a) for a in ALPHAS},
}


def baselines(engine: Engine, sig: Signals) -> dict[str, list[str]]:
    """The rankers the fusion must never fall below, and the fusion before this one."""
    return {
        "minilm": engine.top(sig.whole),
        "multiview": engine.top(sig.dense),
        "bm25": engine.top(sig.bm25, positive=True),
        "rrf (before)": _rrf(engine, sig),
    }


def text_variants(engine: Engine) -> dict[str, Engine]:
    """The catalog indexed with other texts: the parameters' names alone in both views
    (the text before), and their descriptions in the embedded text too, with and
    without them in BM25's."""
    from sidecar.tools.records import embedding_text

    protocol = engine.protocol
    names = [embedding_text(t) for t in protocol.tools]
    described = protocol.lexical or names
    embedded = engine.embedder.embed(described)

    def variant(lexical: list[str], matrix: np.ndarray) -> Engine:
        return Engine(protocol, engine.embedder, engine.vectors, lexical=lexical, matrix=matrix)

    return {
        "parameter names only": variant(names, engine.matrix),
        "descriptions embedded and in BM25": variant(described, embedded),
        "descriptions embedded only": variant(names, embedded),
    }


# ---- metrics ----------------------------------------------------------------------------
def scores_of(ranked: Sequence[str], relevant: Sequence[str], k: int = K) -> dict[str, float]:
    rel = set(relevant)
    top = list(ranked[:k])
    dcg = sum(1.0 / math.log2(i + 2) for i, t in enumerate(top) if t in rel)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(rel), k)))
    return {
        "ndcg@1": 1.0 if ranked[:1] and ranked[0] in rel else 0.0,
        "ndcg@5": dcg / ideal if ideal else 0.0,
        "recall@5": len(rel & set(top)) / len(rel) if rel else 0.0,
        "comp@5": 1.0 if rel <= set(top) else 0.0,
    }


def averaged(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    if not rows:
        return {}
    return {m: round(100 * statistics.fmean(r[m] for r in rows), 1) for m in rows[0]} | {
        "n": len(rows)
    }
