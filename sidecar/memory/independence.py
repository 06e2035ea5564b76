"""Independent evidence: when two failing calls are one piece of evidence.

A condition learned from failures is only as strong as the number of *independent*
situations behind it.  Two sessions are one **situation** when they share the task
input (identical or near-identical text) or act on the same objects (a grounded id-like
value of a single-valued argument in common: the same order, the same account; the ids
in a list argument are parts, often shared by many objects); the relation is closed
transitively, so a situation is a connected component of failing calls.  A retry inside
one session, a replayed report, and repeated attempts at one task by one user all count
once, for every condition they support.

Successes are the background a condition is tested against; they are counted in
*success units*: sessions, with sessions of identical task text counted once (near-
identical text is only judged between failing calls, where every pair can be compared).

**Sources** (who reported the evidence: a named token, the gateway, OTLP) are a
further axis: a learned block needs failures from at least two sources, or one trusted
source (:class:`~sidecar.memory.thresholds.Thresholds`).

Everything here is a function of the set of evidence, never of its order.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence

TEXT_HEAD = 600
"""Characters of the task input that identify a task (later turns drift)."""
MINHASHES = 32
BANDS = 16
"""Candidate pairs share one of ``BANDS`` bands of ``MINHASHES // BANDS`` hashes."""
NEAR_IDENTICAL = 0.6
"""Estimated word-shingle Jaccard similarity at which two task texts are one task."""
SHINGLE = 3
_WORD = re.compile(r"\w+", re.UNICODE)
_MASK = (1 << 61) - 1
# 32 fixed (odd multiplier, offset) pairs: a seeded family of hash permutations
_SALTS = tuple(
    (
        int.from_bytes(hashlib.blake2b(f"a{i}".encode(), digest_size=8).digest(), "big") | 1,
        int.from_bytes(hashlib.blake2b(f"b{i}".encode(), digest_size=8).digest(), "big"),
    )
    for i in range(MINHASHES)
)


def _h64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def normalized_head(text: str | None) -> str:
    """The task text as a task is identified: its head, lower-cased, words only."""
    if not text:
        return ""
    return " ".join(_WORD.findall(text[:TEXT_HEAD].lower()))


def text_fingerprint(text: str | None) -> str | None:
    """Identical task texts (after :func:`normalized_head`) share this fingerprint."""
    head = normalized_head(text)
    if not head:
        return None
    return hashlib.blake2b(head.encode(), digest_size=8).hexdigest()


def minhash(text: str | None) -> tuple[int, ...] | None:
    """A MinHash signature of the head's word 3-shingles (``None`` without text)."""
    words = normalized_head(text).split()
    if not words:
        return None
    shingles = {" ".join(words[i : i + SHINGLE]) for i in range(max(1, len(words) - SHINGLE + 1))}
    hashed = [_h64(s) for s in shingles]
    return tuple(min(((a * h + b) & _MASK) for h in hashed) for a, b in _SALTS)


def similarity(a: Sequence[int], b: Sequence[int]) -> float:
    """Estimated Jaccard similarity of two signatures."""
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


class Situations:
    """The situations of a set of failing calls: each call is ``(session, id marks,
    text signature)``; calls are linked when they share a session or an id mark, or
    their texts are near-identical (candidates found by band, then compared)."""

    def __init__(self, calls: Sequence[tuple[str, Sequence[str], Sequence[int] | None]]) -> None:
        self._parent = list(range(len(calls)))
        first: dict[str, int] = {}
        for i, (session, marks, _text) in enumerate(calls):
            for mark in (f"s\x1f{session}", *(f"i\x1f{m}" for m in marks)):
                j = first.setdefault(mark, i)
                if j != i:
                    self._union(i, j)
        rows = MINHASHES // BANDS
        buckets: dict[tuple[int, tuple[int, ...]], list[int]] = {}
        for i, (_s, _m, text) in enumerate(calls):
            if text is None:
                continue
            for band in range(BANDS):
                key = (band, tuple(text[band * rows : (band + 1) * rows]))
                buckets.setdefault(key, []).append(i)
        compared: set[tuple[int, int]] = set()
        for members in buckets.values():
            for x in range(len(members)):
                for y in range(x + 1, len(members)):
                    i, j = members[x], members[y]
                    if (i, j) in compared or self.find(i) == self.find(j):
                        continue
                    compared.add((i, j))
                    a, b = calls[i][2], calls[j][2]
                    assert a is not None and b is not None
                    if similarity(a, b) >= NEAR_IDENTICAL:
                        self._union(i, j)

    def find(self, i: int) -> int:
        root = i
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[i] != root:
            self._parent[i], i = root, self._parent[i]
        return root

    def _union(self, i: int, j: int) -> None:
        a, b = self.find(i), self.find(j)
        if a != b:
            # the smaller index is the root: the result does not depend on call order
            self._parent[max(a, b)] = min(a, b)

    def count(self, calls: Iterable[int] | None = None) -> int:
        """Distinct situations among ``calls`` (every call when ``None``)."""
        indexes = range(len(self._parent)) if calls is None else calls
        return len({self.find(i) for i in indexes})
