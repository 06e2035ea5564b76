"""What an active index keeps of its collection in its own process, and how those copies
follow writes: the exact tier's vectors (:mod:`indexes.exact`), the BM25 copy of the
documents (:mod:`indexes.lexical`) and the hit fields a lookup shows.

Chroma stays the store of record.  Each copy is loaded from it on first use and told
about each of the index's own writes as they happen: a write begins (loads in flight
will not install), ends (the copy takes what was written), or fails part-way (the copy
is dropped, to be loaded again).  Another process's writes are followed by dropping
everything (:meth:`LocalCopies.drop`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import numpy as np

from indexes.errors import IndexBackendError
from indexes.exact import ExactTier, Snapshot
from indexes.lexical import LexicalScores, LexicalTier
from indexes.records import MetadataValue

log = logging.getLogger(__name__)


class LocalCopies:
    """The exact tier (when ``exact_limit``) and the lexical tier (when ``lexical``)."""

    def __init__(self, exact_limit: int | None, lexical: bool) -> None:
        self.exact = ExactTier(exact_limit) if exact_limit else None
        self._exact_loading = threading.Lock()
        self._exact_failed = -1
        """The tier generation whose load failed (not retried until a write)."""
        self.lexical = LexicalTier() if lexical else None
        self._lexical_loading = threading.Lock()

    def set_exact_limit(self, limit: int) -> None:
        if self.exact is not None:
            self.exact.drop()
        self.exact = ExactTier(limit) if limit > 0 else None

    # ---- following writes -----------------------------------------------------------
    def begin_write(self) -> None:
        if self.exact is not None:
            self.exact.begin_write()
        if self.lexical is not None:
            self.lexical.begin_write()

    def upserted(
        self, ids: Sequence[str], vectors: np.ndarray, documents: Mapping[str, str]
    ) -> None:
        if self.exact is not None and ids:
            self.exact.upserted(ids, vectors)
        if self.lexical is not None and ids:
            self.lexical.upserted(documents)

    def deleted(self, ids: Collection[str]) -> None:
        """``ids`` are leaving (or have left) the store: never ranked again."""
        if self.exact is not None:
            self.exact.deleted(ids)
        if self.lexical is not None:
            self.lexical.deleted(ids)

    def drop(self) -> None:
        """Forget both copies: a write failed part-way, or another process wrote."""
        if self.exact is not None:
            self.exact.drop()
        if self.lexical is not None:
            self.lexical.drop()

    # ---- the exact tier ---------------------------------------------------------------
    def snapshot(
        self, size: Callable[[], int], load: Callable[[int], Snapshot | None]
    ) -> Snapshot | None:
        """The exact tier's snapshot, loaded with ``load`` on first use; ``None`` when the
        tier is off or the collection (``size``) is over its limit."""
        tier = self.exact
        if tier is None:
            return None
        found = tier.current()
        if found is not None:
            return found
        if size() > tier.limit:
            return None
        # one load at a time, and no lookup waits for it: while one thread loads, the
        # others ask Chroma (a load costs hundreds of ms at 10k tools)
        if not self._exact_loading.acquire(blocking=False):
            return None
        try:
            found = tier.current()
            if found is not None:
                return found
            generation = tier.generation()
            if generation == self._exact_failed:
                return None  # nothing was written since the last load failed
            try:
                loaded = load(tier.limit)
            except IndexBackendError as exc:
                # the tier is a copy: Chroma ranks until a write makes a retry worthwhile
                log.warning("exact tier not loaded (%s); Chroma ranks lookups", exc)
                self._exact_failed = generation
                return None
            if loaded is None or not tier.install(loaded, generation):
                return None  # too large, or a write ran meanwhile: Chroma ranks this one
            return loaded
        finally:
            self._exact_loading.release()

    # ---- the lexical tier -----------------------------------------------------------
    def lexical_scored(
        self,
        text: str,
        n: int,
        include: Collection[str],
        documents: Callable[[], Mapping[str, str]],
    ) -> LexicalScores | None:
        """The ``n`` best ids for ``text`` by BM25 (:meth:`LexicalTier.scored`), loading
        the documents with ``documents`` on first use; ``None`` when there is no lexical
        tier or it could not be loaded (a write ran meanwhile, or Chroma failed: the
        next lookup tries again)."""
        lexical = self.lexical
        if lexical is None:
            return None
        found = lexical.scored(text, n, include)
        if found is not None:
            return found
        with self._lexical_loading:
            if not lexical.loaded():
                generation = lexical.generation()
                try:
                    loaded = documents()
                except IndexBackendError as exc:
                    log.warning("lexical tier not loaded (%s); dense ranking only", exc)
                    return None
                lexical.install(loaded, generation)
        return lexical.scored(text, n, include)


class FieldCache:
    """The metadata fields a lookup shows, per record, read once and kept in step with
    the index's own writes.  A lookup keeps the fields it read only if no write began or
    ended meanwhile (the generation)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fields: tuple[str, ...] = ()
        self._known: dict[str, dict[str, MetadataValue]] = {}
        self._generation = 0

    def begin(self, wanted: tuple[str, ...]) -> int:
        """Start a read of ``wanted`` fields; returns the generation to keep them at."""
        with self._lock:
            if wanted != self._fields:
                self._fields, self._known = wanted, {}
                self._generation += 1
            return self._generation

    def known(self, ids: Iterable[str]) -> dict[str, dict[str, MetadataValue]]:
        known = self._known
        found: dict[str, dict[str, MetadataValue]] = {}
        for rid in ids:
            fields_of = known.get(rid)  # another thread may drop it at any moment
            if fields_of is not None:
                found[rid] = fields_of
        return found

    def keep(self, generation: int, found: Mapping[str, dict[str, MetadataValue]]) -> None:
        with self._lock:
            if generation == self._generation:
                self._known.update(found)

    def forget(self, ids: Iterable[str]) -> None:
        with self._lock:
            self._generation += 1
            for rid in ids:
                self._known.pop(rid, None)

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._known.clear()
