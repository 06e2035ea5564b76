"""The active tools as a whole: adding, syncing a catalog source, listing, and keeping
the hot index in step with the records (see :mod:`sidecar.tools.records`).

Writes go through the home's ``hot_write`` (the hot-index revision moves before and
after), and a tool the state says is cold (evicted, or moving) is never added back:
only ``restore`` brings one back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace

from indexes import ActiveIndex, IndexRecord
from sidecar.errors import IndexUnavailable, InvalidInput
from sidecar.model import Tool
from sidecar.storage.state import State
from sidecar.tools.paging import ToolPage, View, check_limit, decode_cursor, page_of
from sidecar.tools.records import (
    AddToolsResult,
    SyncResult,
    ToolRecords,
    add_tools,
    index_record,
    redacted_tool,
    tool_from_record,
)

log = logging.getLogger("sidecar")
REGISTRY_MIGRATED = "registry_migrated"
REBUILD = (
    "the owner of the home rebuilds it from the state's records when it next opens the "
    "index (start the server, or run `sidecar evict --recover`)"
)


class Tools:
    def __init__(
        self,
        records: ToolRecords,
        state: State,
        index: Callable[[], ActiveIndex],
        hot_write: Callable[[], AbstractContextManager[None]],
        cold: Callable[[], frozenset[str]],
    ) -> None:
        """``index`` opens the hot index on first use; ``cold`` gives the tools the
        state says are not hot."""
        self._records = records
        self._state = state
        self._index = index
        self._hot_write = hot_write
        self._cold = cold

    # ---- writes -----------------------------------------------------------------------
    def add(
        self, tools: Sequence[Tool], progress: Callable[[int], None] | None = None
    ) -> AddToolsResult:
        index = self._index()
        with self._hot_write():
            result = add_tools(
                tools,
                records=self._records,
                index=index,
                state=self._state,
                refuse=self._refuse_cold,
                progress=progress,
            )
        variants = self._variants_of_evicted([t.tool_id for t in tools])
        evicted = self._state.moves.evicted() if variants else {}
        if variants:
            with self._state.tx() as tx:
                for new, old in variants:
                    self._state.sequences.log(
                        tx, evicted[old].move_id, "variant_added", new, time.time()
                    )
        notes = tuple(
            f"{new} looks like the evicted tool {old} (same name up to case and separators): "
            f"added; if it is the same tool, `sidecar restore {old}` keeps its history"
            for new, old in variants
        )
        return replace(result, warnings=result.warnings + notes) if notes else result

    def sync(self, source: str, tools: Sequence[Tool]) -> SyncResult:
        if not isinstance(source, str) or not source.strip():
            raise InvalidInput("a catalog source needs a name")
        wanted = {t.tool_id: t for t in tools}
        cold = self._cold()
        known = self._records.get(i for i in wanted if i not in cold)
        changed = [
            tool
            for tool_id, tool in wanted.items()
            if tool_id not in cold
            and _differs(known.get(tool_id), index_record(redacted_tool(tool)))
        ]
        if changed:
            self.add(changed)
        gone = sorted(self._records.of_source(source) - set(wanted) - set(cold))
        if gone:
            with self._hot_write():
                self._index().delete(gone)
                self._records.remove(gone)
        self._records.set_source(source, [i for i in wanted if i not in cold], gone)
        return SyncResult(
            added=tuple(t.tool_id for t in changed if t.tool_id not in known),
            updated=tuple(t.tool_id for t in changed if t.tool_id in known),
            gone=tuple(gone),
            kept_out=tuple(sorted(i for i in wanted if i in cold)),
        )

    def sync_records(self, index: ActiveIndex) -> None:
        """Keep the records and the index in step: a home from before the records were
        kept gets them from the index, once; a record the index lost (a deleted
        ``chroma/`` folder) or whose vector it lost is embedded again from the record."""
        if self._state.revisions.meta(REGISTRY_MIGRATED) is None:
            records = list(index.scan())
            with self._state.tx() as tx:
                self._state.tools.put(tx, records)
                self._state.revisions.set_meta(tx, REGISTRY_MIGRATED, "1")
                self._state.revisions.bump_tools(tx)
            return
        ids = self._records.ids()
        missing = ids - index.existing(ids)
        # listed but without a vector (a write cut short by a full disk): never ranked
        missing |= index.unreadable(ids - missing)
        if missing:
            log.warning("hot index lacks %d active tool(s); rebuilding them", len(missing))
            with self._hot_write():
                index.upsert(list(self._records.get(sorted(missing)).values()))

    def check_complete(self, index: ActiveIndex) -> None:
        """A reader cannot rebuild the hot index: one that lost active tools (a deleted
        or emptied ``chroma/`` folder) is refused rather than served incomplete."""
        if self._state.revisions.meta(REGISTRY_MIGRATED) is None:
            return  # an old home: the index is its only record of the tools
        ids = self._records.ids()
        missing = len(ids - index.existing(ids)) if ids else 0
        if missing:
            raise IndexUnavailable(
                f"the hot index lacks {missing} of the {len(ids)} active tool(s): {REBUILD}"
            )

    # ---- reads ------------------------------------------------------------------------
    def cataloged(self, ids: set[str]) -> set[str]:
        """Which of ``ids`` the catalog holds: active, evicted, or with their move begun."""
        return self._records.present(ids) | (ids & self._cold())

    def active(self) -> list[Tool]:
        """The active tools; not one whose move to the cold store has begun (lookups do
        not serve it either)."""
        if self._state.revisions.meta(REGISTRY_MIGRATED) is None:
            records = sorted(self._index().scan(), key=lambda r: r.id)  # an old home, read
        else:
            records = self._records.all()
        moving = self._state.moves.in_flight_tools()
        records = [r for r in records if r.id not in moving]
        creds = self._state.credentials.of(r.id for r in records)
        return [tool_from_record(r, creds.get(r.id, ())) for r in records]

    def page(self, cursor: str | None, limit: int, hidden: Collection[str], view: View) -> ToolPage:
        """A page of :meth:`active` (see :mod:`sidecar.tools.paging`), ``hidden`` left out."""
        after = decode_cursor(cursor)
        limit = check_limit(limit)
        if self._state.revisions.meta(REGISTRY_MIGRATED) is None:
            everything = self.active()  # an old home, read: its index is the list

            def fetch(start: str | None, n: int) -> list[Tool]:
                return [t for t in everything if start is None or t.tool_id > start][:n]

        else:
            moving = self._state.moves.in_flight_tools()

            def fetch(start: str | None, n: int) -> list[Tool]:
                records = self._records.page(start, n)
                creds = self._state.credentials.of(r.id for r in records)
                return [tool_from_record(r, creds.get(r.id, ())) for r in records]

            hidden = set(hidden) | moving
        return page_of(fetch, after, limit, hidden, view)

    def get(self, tool_ids: Iterable[str]) -> dict[str, Tool]:
        records = self._records.get(tool_ids)
        creds = self._state.credentials.of(records)
        return {i: tool_from_record(r, creds.get(i, ())) for i, r in records.items()}

    # ---- what may not come back -------------------------------------------------------
    def _refuse_cold(self, ids: Sequence[str]) -> None:
        evicted = self._state.moves.evicted()
        moving = self._state.moves.in_flight_tools()
        refused = sorted(i for i in ids if i in evicted or i in moving)
        if refused:
            where = ", ".join(
                f"{t} ({evicted[t].pointer if t in evicted else 'eviction in progress'})"
                for t in refused
            )
            raise InvalidInput(
                f"evicted tool(s) cannot be re-added: {where}; bring one back with "
                "`sidecar restore TOOL_ID --reason ...`"
            )

    def _variants_of_evicted(self, ids: Sequence[str]) -> list[tuple[str, str]]:
        """(new id, evicted id) pairs whose names differ only by case and separators."""
        evicted = {_name_key(t): t for t in self._state.moves.evicted()}
        return [
            (i, evicted[_name_key(i)])
            for i in dict.fromkeys(ids)
            if _name_key(i) in evicted and evicted[_name_key(i)] != i
        ]


def _name_key(tool_id: str) -> str:
    return "".join(ch for ch in tool_id.lower() if ch.isalnum())


def _differs(old: IndexRecord | None, new: IndexRecord) -> bool:
    return old is None or (old.document, dict(old.metadata)) != (new.document, dict(new.metadata))
