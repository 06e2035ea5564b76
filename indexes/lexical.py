"""The lexical tier: BM25 (Lucene scoring, ``bm25s``) over the same documents as the
vectors, kept in the process beside the exact tier.

Tool names carry much of what a query asks for (``getVehicleBatteryLevel``,
``search_flights``), and a bag-of-words model reads them only once they are words:
:func:`terms` splits identifiers on ``_ - . / :`` and camelCase, folds case and width
(NFKC), drops English stop words and stems with the Snowball English stemmer
(PyStemmer).  Letters of scripts written without spaces (Chinese, Japanese) become one
term each, so a query in them still matches a description in them.

Chroma stays the store of record: :class:`~indexes.active.ActiveIndex` loads the
documents from it on the first lookup and tells the tier about each of its own writes.
A write changes the tier's documents at once (a deleted id is never ranked again, even
before the next rebuild); the BM25 matrix is rebuilt from them on the next lookup after
a write, re-tokenizing only what changed.  Like the exact tier, a load that overlapped
a write is thrown away rather than installed.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import bm25s

K1 = 1.5
B = 0.75
"""BM25's saturation and length normalisation: Lucene's defaults, which ``bm25s``
also uses."""

_SEPARATORS = re.compile(r"[_\-./:]+")
_WORD = re.compile(r"\w+")
# a lower-case letter or digit followed by an upper-case one, or the last capital of a
# run followed by a lower-case letter: getHTTPResponse -> get HTTP Response
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def _unspaced(ch: str) -> bool:
    """A letter of a script written without spaces between words."""
    code = ord(ch)
    return (
        0x3040 <= code <= 0x30FF  # hiragana, katakana
        or 0x3400 <= code <= 0x4DBF  # CJK extension A
        or 0x4E00 <= code <= 0x9FFF  # CJK unified ideographs
        or 0xF900 <= code <= 0xFAFF  # CJK compatibility ideographs
        or 0xAC00 <= code <= 0xD7AF  # Hangul syllables
    )


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    import Stemmer

    return Stemmer.Stemmer("english")


@lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def words(text: str) -> list[str]:
    """``text`` as lower-case words: identifiers split, stop words kept, no stemming."""
    text = _SEPARATORS.sub(" ", unicodedata.normalize("NFKC", text))
    out: list[str] = []
    for word in _WORD.findall(text):
        for part in _CAMEL.split(word):
            if any(_unspaced(ch) for ch in part):
                out += _split_unspaced(part.lower())
            elif part:
                out.append(part.lower())
    return out


def _split_unspaced(part: str) -> list[str]:
    out: list[str] = []
    run = ""
    for ch in part:
        if _unspaced(ch):
            if run:
                out.append(run)
                run = ""
            out.append(ch)
        else:
            run += ch
    if run:
        out.append(run)
    return out


def terms(text: str) -> list[str]:
    """What BM25 counts in ``text``: its words (:func:`words`) less English stop words,
    stemmed."""
    stop = _stopwords()
    kept = [w for w in words(text) if w not in stop]
    stemmed: list[str] = _stemmer().stemWords(kept)
    return stemmed


@dataclass(frozen=True)
class LexicalScores:
    """One query's BM25 scores: the best ids, best first; the scores of ids asked for by
    name; and the standard deviation of the score over the collection (the scale on
    which the hybrid ranking weighs it)."""

    ranked: list[tuple[str, float]]
    scores: dict[str, float]
    spread: float


@dataclass(frozen=True)
class LexicalSnapshot:
    """A BM25 index over ``ids`` (row ``i`` is ``ids[i]``)."""

    ids: tuple[str, ...]
    _model: bm25s.BM25 | None

    @classmethod
    def build(cls, ids: Sequence[str], tokens: Sequence[Sequence[str]]) -> LexicalSnapshot:
        if len(ids) != len(tokens):
            raise ValueError("ids and documents differ in length")
        if not ids:
            return cls((), None)
        import bm25s

        # bm25s sets its own logger to DEBUG: once a root handler exists (the mcp SDK's
        # server installs one) every build would print a line; its warnings still pass
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        model = bm25s.BM25(k1=K1, b=B, method="lucene")
        # an empty document still gets a row (bm25s gives it the empty token)
        model.index([list(t) for t in tokens], show_progress=False)
        return cls(tuple(ids), model)

    def __len__(self) -> int:
        return len(self.ids)

    def scores(self, query_terms: Sequence[str]) -> np.ndarray:
        """BM25 score of every row for ``query_terms`` (zeros for unknown terms)."""
        if self._model is None or not query_terms:
            return np.zeros(len(self.ids), dtype=np.float32)
        known = [t for t in query_terms if t in self._model.vocab_dict]
        if not known:
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(self._model.get_scores(known), dtype=np.float32)

    def top(
        self, query_terms: Sequence[str], n: int, skip: Collection[str] = ()
    ) -> list[tuple[str, float]]:
        """The ``n`` best rows with a positive score, best first (equal scores in row
        order), leaving out ``skip``."""
        return self.scored(query_terms, n, skip).ranked

    def scored(
        self,
        query_terms: Sequence[str],
        n: int,
        skip: Collection[str] = (),
        include: Collection[str] = (),
    ) -> LexicalScores:
        """:meth:`top`, the scores of the ``include`` ids it holds (0 for no match), and
        the standard deviation of the score over every row."""
        scores = self.scores(query_terms)
        spread = float(scores.std()) if len(scores) else 0.0
        position = self._position()
        extra = {rid: float(scores[position[rid]]) for rid in include if rid in position}
        if skip:
            for rid in skip:
                at = position.get(rid)
                if at is not None:
                    scores[at] = 0.0
                    extra.pop(rid, None)
        positive = np.flatnonzero(scores > 0)
        if not len(positive) or n <= 0:
            return LexicalScores([], extra, spread)
        if n < len(positive):
            best = positive[np.argpartition(-scores[positive], n - 1)[:n]]
        else:
            best = positive
        order = best[np.lexsort((best, -scores[best]))]
        return LexicalScores([(self.ids[i], float(scores[i])) for i in order], extra, spread)

    def _position(self) -> Mapping[str, int]:
        found: dict[str, int] | None = self.__dict__.get("_pos")
        if found is None:
            found = {rid: i for i, rid in enumerate(self.ids)}
            object.__setattr__(self, "_pos", found)
        return found


class LexicalTier:
    """The documents of a collection and a BM25 snapshot built from them, or nothing
    (not loaded yet, or dropped)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._documents: dict[str, str] | None = None
        self._tokens: dict[str, list[str]] = {}
        self._snapshot: LexicalSnapshot | None = None
        self._removed: frozenset[str] = frozenset()
        """Ids deleted since the snapshot was built: never ranked."""
        self._generation = 0

    def loaded(self) -> bool:
        return self._documents is not None

    def generation(self) -> int:
        with self._lock:
            return self._generation

    def install(self, documents: Mapping[str, str], generation: int) -> bool:
        """Take ``documents`` (read from the store since ``generation``) as the
        collection, unless a write began since then."""
        with self._lock:
            if generation != self._generation:
                return False
            self._documents = dict(documents)
            self._tokens = {}
            self._snapshot = None
            self._removed = frozenset()
            return True

    def begin_write(self) -> None:
        """A write to the store is about to start: loads in flight will not install."""
        with self._lock:
            self._generation += 1

    def upserted(self, documents: Mapping[str, str]) -> None:
        """The store now holds ``documents`` (id -> text)."""
        with self._lock:
            self._generation += 1
            if self._documents is None:
                return
            for rid, text in documents.items():
                if self._documents.get(rid) != text:
                    self._tokens.pop(rid, None)
                self._documents[rid] = text
            self._snapshot = None

    def deleted(self, ids: Collection[str]) -> None:
        """``ids`` are leaving (or have left) the store: never rank them again."""
        with self._lock:
            self._generation += 1
            if self._documents is None:
                return
            gone = [rid for rid in ids if rid in self._documents]
            for rid in gone:
                del self._documents[rid]
                self._tokens.pop(rid, None)
            if gone and self._snapshot is not None:
                self._removed |= frozenset(gone)

    def drop(self) -> None:
        """Forget everything (the store changed in a way this tier cannot follow)."""
        with self._lock:
            self._generation += 1
            self._documents = None
            self._tokens = {}
            self._snapshot = None
            self._removed = frozenset()

    def ranked(self, text: str, n: int) -> list[tuple[str, float]] | None:
        """The ``n`` best ids for ``text`` with their BM25 scores, best first; ``None``
        when the tier holds nothing (load it first)."""
        found = self.scored(text, n)
        return None if found is None else found.ranked

    def scored(self, text: str, n: int, include: Collection[str] = ()) -> LexicalScores | None:
        """:meth:`ranked` with the scores of ``include`` and the spread
        (:meth:`LexicalSnapshot.scored`); ``None`` when the tier holds nothing."""
        with self._lock:
            if self._documents is None:
                return None
            snapshot = self._snapshot
            if snapshot is None:
                snapshot = self._rebuild()
            removed = self._removed
        return snapshot.scored(terms(text), n, removed, include)

    def _rebuild(self) -> LexicalSnapshot:
        assert self._documents is not None
        ids = sorted(self._documents)
        for rid in ids:
            if rid not in self._tokens:
                self._tokens[rid] = terms(self._documents[rid])
        self._snapshot = LexicalSnapshot.build(ids, [self._tokens[rid] for rid in ids])
        self._removed = frozenset()
        return self._snapshot


def lexical_documents(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Id -> document, the last one winning."""
    return dict(pairs)
