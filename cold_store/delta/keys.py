"""Each process's key cache: key -> (file, row group, row) for the table's version it
last loaded, so that a lookup reads one row group of one file.

It is built from the data files of the version first loaded and kept up to date from
the files each newer version adds or removes (a compaction removes files and adds one
holding the same keys).  A file found unreadable stays listed (only a commit removes a
file from a Delta table) but its keys leave the cache, so that they can be archived
again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from cold_store.delta.files import KeysOfFile
from cold_store.delta.log import FileFacts


@dataclass
class CachedFile:
    seq: int
    """The order in which this process first saw the file."""
    size: int
    rows: int
    keys: list[str]
    groups: list[int]
    """Rows per row group."""
    names: frozenset[str]
    """The columns the file holds (older files lack columns added since)."""


Location = tuple[str, int, int]
"""(file, row group, row in the group)."""


class KeyCache:
    def __init__(self) -> None:
        self.version = -1
        self.files: dict[str, CachedFile] = {}
        self.keys: dict[str, Location] = {}
        self.lost: dict[str, str] = {}
        """Keys whose file turned out unreadable -> that file."""
        self.unreadable: dict[str, str] = {}
        """Files found unreadable -> why; skipped by every read."""
        self._next_seq = 0

    def sizes(self) -> dict[str, int]:
        return {path: entry.size for path, entry in self.files.items()}

    def forget_gone(self, current: dict[str, FileFacts]) -> list[str]:
        """Forget the files ``current`` no longer names; returns them."""
        gone = [p for p in self.files if p not in current]
        for path in gone:
            entry = self.files.pop(path)
            self.unreadable.pop(path, None)
            for k in entry.keys:
                if self.keys.get(k, ("",))[0] == path:
                    del self.keys[k]
        return gone

    def add(
        self,
        current: dict[str, FileFacts],
        read_keys: Callable[[Sequence[str]], list[KeysOfFile | str]],
    ) -> list[tuple[str, KeysOfFile]]:
        """Index the files of ``current`` not known yet, in commit order; returns those
        read (with their footers).  On an error nothing new is indexed (the next look
        tries them again)."""
        fresh = sorted(
            (p for p in current if p not in self.files), key=lambda p: current[p].added_at
        )
        for path in fresh:  # sizes first: reading the new files needs them
            self.files[path] = CachedFile(-1, current[path].size, 0, [], [], frozenset())
        try:
            read = read_keys(fresh)
        except BaseException:
            for path in fresh:
                del self.files[path]
            raise
        indexed: list[tuple[str, KeysOfFile]] = []
        for path, found in zip(fresh, read, strict=True):
            facts = current[path]
            if isinstance(found, str):
                self.unreadable[path] = found
                self.files[path] = CachedFile(-1, facts.size, facts.rows, [], [], frozenset())
                self.files[path].seq = self._next_seq
                self._next_seq += 1
            else:
                keys, groups, names, _footer = found
                self.take(path, CachedFile(-1, facts.size, len(keys), keys, groups, names))
                indexed.append((path, found))
        return indexed

    def take(self, path: str, entry: CachedFile) -> None:
        """Index a file whose keys (in file order) and row groups are known."""
        entry.seq = self._next_seq
        self._next_seq += 1
        self.files[path] = entry
        offsets = [(g, r) for g, n in enumerate(entry.groups) for r in range(n)]
        for k, (g, r) in zip(entry.keys, offsets, strict=True):
            self.keys.setdefault(k, (path, g, r))
            self.lost.pop(k, None)

    def mark_unreadable(self, path: str, reason: str) -> None:
        self.unreadable[path] = reason
        entry = self.files.get(path)
        for k in entry.keys if entry else ():
            if self.keys.get(k, ("",))[0] == path:
                del self.keys[k]
                self.lost[k] = path

    def in_order(self) -> list[str]:
        """Every key, in the order the cache first saw the files holding them."""
        return sorted(
            self.keys,
            key=lambda k: (self.files[self.keys[k][0]].seq, self.keys[k][1], self.keys[k][2]),
        )

    def readable_files(self) -> list[tuple[str, CachedFile]]:
        """The readable files, in the order first seen."""
        return sorted(
            ((p, f) for p, f in self.files.items() if p not in self.unreadable),
            key=lambda item: item[1].seq,
        )

    def clear(self) -> None:
        self.files.clear()
        self.keys.clear()
        self.version = -1
