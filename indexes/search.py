"""Top-k ranking over the active index's collection: exactly, in the process, while the
exact tier holds the collection (:mod:`indexes.exact`); else by Chroma's query, with
excluded ids dropped after an over-fetch rather than with a Chroma ``where`` filter,
which costs 10-100x an unfiltered query."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection

import numpy as np

from indexes.chroma import ChromaStore
from indexes.copies import FieldCache, LocalCopies
from indexes.exact import Snapshot
from indexes.records import IndexHit, MetadataValue, only

Ranked = tuple[list[IndexHit], list[IndexHit]]


class Searcher:
    """Ranks ``store``'s records; ``size`` is the collection's (cached) size and ``load``
    reads every vector for the exact tier (``None`` over the given limit)."""

    def __init__(
        self,
        store: ChromaStore,
        copies: LocalCopies,
        size: Callable[[], int],
        load: Callable[[int], Snapshot | None],
    ) -> None:
        self._store = store
        self._copies = copies
        self._size = size
        self._load = load

    def snapshot(self) -> Snapshot | None:
        """The exact tier's snapshot, loaded from Chroma on first use; ``None`` when the
        tier is off or the collection is over its limit."""
        return self._copies.snapshot(self._size, self._load)

    def ranked(
        self,
        vector: np.ndarray,
        k: int,
        exclude: Collection[str],
        documents: bool,
        ids_only: bool,
    ) -> Ranked:
        """The ``k`` best records not in ``exclude``, and the excluded ones that ranked
        above the last of them (what the exclusion displaced), each best first."""
        snapshot = self.snapshot()
        # a vector of another dimension goes to Chroma, which rejects it as before
        if snapshot is not None and vector.shape[-1:] == snapshot.matrix.shape[1:]:
            found = self._exact_ranked(snapshot, vector, k, exclude, documents, ids_only)
            if found is not None:
                return found
        fetch = self.first_fetch(k, len(exclude))
        while True:
            ranked = self._store.query(vector, fetch, documents and not ids_only, not ids_only)
            hits: list[IndexHit] = []
            displaced: list[IndexHit] = []
            for hit in ranked:
                if len(hits) == k:
                    break
                (displaced if hit.id in exclude else hits).append(hit)
            if len(hits) == k or len(ranked) < fetch:
                return hits, displaced
            # the exclusions took the page: widen, doubling, up to the size that is sure
            # to be enough (k plus every exclusion)
            fetch = min(fetch * 2, k + len(exclude))

    def scored(
        self, vector: np.ndarray, k: int, exclude: Collection[str]
    ) -> tuple[list[IndexHit], list[IndexHit], float | None]:
        """:meth:`ranked` by ids alone, with the standard deviation of the similarity
        over the collection when the exact tier ranked (``None`` when Chroma did)."""
        snapshot = self.snapshot()
        if snapshot is not None and vector.shape[-1:] == snapshot.matrix.shape[1:]:
            hits, displaced, spread = snapshot.scored(vector, k, exclude)
            return (
                [IndexHit(rid, score, "", {}) for rid, score in hits],
                [IndexHit(rid, score, "", {}) for rid, score in displaced],
                spread,
            )
        found, pushed = self.ranked(vector, k, exclude, documents=False, ids_only=True)
        return found, pushed, None

    def fields(
        self,
        vector: np.ndarray,
        k: int,
        exclude: Collection[str],
        wanted: tuple[str, ...],
        cache: FieldCache | None,
    ) -> Ranked:
        """:meth:`ranked` with only the metadata ``wanted`` on each hit (no document),
        the fields read from ``cache`` when given (and kept there once read)."""
        if cache is None:
            hits, displaced = self.ranked(vector, k, exclude, documents=False, ids_only=False)
            return [only(h, wanted) for h in hits], [only(h, wanted) for h in displaced]
        generation = cache.begin(wanted)
        hits, displaced = self.ranked(vector, k, exclude, documents=False, ids_only=True)
        found = cache.known(h.id for h in hits)
        missing = [h.id for h in hits if h.id not in found]
        if missing:
            read: dict[str, dict[str, MetadataValue]] = {
                rid: {f: v for f, v in rec.metadata.items() if f in wanted}
                for rid, rec in self._store.records(missing, documents=False).items()
            }
            found |= read
            cache.keep(generation, read)
            if len(found) < len(hits):
                # deleted between the query and the get: rank again in one query
                hits, displaced = self.ranked(vector, k, exclude, documents=False, ids_only=False)
                return [only(h, wanted) for h in hits], [only(h, wanted) for h in displaced]
        return [IndexHit(h.id, h.score, "", dict(found[h.id])) for h in hits], displaced

    def _exact_ranked(
        self,
        snapshot: Snapshot,
        vector: np.ndarray,
        k: int,
        exclude: Collection[str],
        documents: bool,
        ids_only: bool,
    ) -> Ranked | None:
        """:meth:`ranked` from the exact tier; ``None`` when Chroma no longer holds a
        winner (another process deleted it): then Chroma ranks this lookup."""
        hits, displaced = snapshot.ranked(vector, k, exclude)
        if ids_only:
            return (
                [IndexHit(rid, score, "", {}) for rid, score in hits],
                [IndexHit(rid, score, "", {}) for rid, score in displaced],
            )
        wanted = [rid for rid, _ in hits + displaced]
        records = self._store.records(wanted, documents) if wanted else {}
        if len(records) < len(wanted):
            return None

        def hit(rid: str, score: float) -> IndexHit:
            return IndexHit(rid, score, records[rid].document, records[rid].metadata)

        return [hit(*h) for h in hits], [hit(*h) for h in displaced]

    def similarities(self, query: np.ndarray, ids: Collection[str]) -> dict[str, float]:
        """The cosine similarity to ``query`` (its best row) of each of ``ids`` held."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return {}
        snapshot = self.snapshot()
        vector = np.asarray(query, dtype=np.float32)
        if snapshot is not None and vector.shape[-1:] == snapshot.matrix.shape[1:]:
            found = snapshot.similarity(vector, wanted)
            if len(found) == len(wanted):
                return found
        out: dict[str, float] = {}
        for got, rows in self._store.vectors_of(wanted):
            out |= Snapshot.build(got, rows).similarity(vector, got)
        return out

    def first_fetch(self, k: int, excluded: int) -> int:
        """How many neighbours to ask for so that ``k`` survive ``excluded`` exclusions
        in one query, as a rule.

        Each extra round trip costs a whole query, while a few more neighbours cost
        little, so the fetch assumes the excluded ids are spread through the ranking as
        through the collection: ``k`` plus a margin, scaled by the share left after the
        exclusions.  The loop in :meth:`ranked` still widens when they cluster.
        """
        if not excluded:
            return k
        margin = min(excluded, max(2, k // 2))
        size = self._size()
        # the excluded ids need not all be in the collection: this over-estimates the
        # share, which only asks for a few more neighbours
        share = min(0.9, excluded / size) if size else 0.0
        fetch = min(k + excluded, math.ceil((k + margin) / (1.0 - share)))
        # never more than the collection holds (a stale size only means one more query)
        return max(k, min(fetch, size)) if size else fetch
