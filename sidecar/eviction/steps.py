"""The steps of journaled moves (:mod:`sidecar.eviction.journal`), in as few round trips
as the stores allow: steps that follow each other with no other store between them
share a transaction, and nothing is read or written once per tool.

Beside a shared archive: one transaction for the intents, the records (acknowledged in
the state, published in group commits), ``archived``, the mandates, ``mandated`` and
the revision before the hot delete; beside a local archive the append comes between
the intents and one transaction for the rest.  Then the hot delete (Chroma's delete and
the ``get`` that verifies it, for the batch) and one transaction that removes the
records, moves the revision and records ``done``.  Every step stays idempotent, so
recovery replays a move from its status whatever committed with it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from cold_store import ColdTable, make_pointer
from indexes import ActiveIndex
from sidecar.archive.publish import Publisher
from sidecar.eviction.journal import Journal
from sidecar.storage.base import Connection
from sidecar.storage.moves import Move
from sidecar.storage.state import State

RELEASED = "credential no longer used by any active tool after eviction"
"""The reason a move's mandates give."""


class MoveSteps:
    """A batch's moves from intent to ``done``, and the replay of unfinished ones."""

    def __init__(
        self,
        *,
        state: State,
        journal: Journal,
        index: Callable[[], ActiveIndex],
        cold_tools: ColdTable,
        publisher: Publisher,
        crash: Callable[[str], None],
    ) -> None:
        """``crash(point)``: the move is past ``point`` (one of
        :data:`sidecar.faults.CRASH_POINTS`), where a test may kill the process."""
        self._state = state
        self._journal = journal
        self._index = index
        self._cold = cold_tools
        self._publisher = publisher
        self._crash = crash

    def move(
        self,
        moves: Sequence[Move],
        rows: Sequence[dict[str, Any]],
        still: Callable[[Any, list[str]], set[str]],
    ) -> tuple[list[Move], int]:
        """A batch's moves from the decision to ``done``; returns the moves written
        (``still(tx, tool_ids)``, read in the first transaction, names those that may
        still move: usage committed since the decision keeps the others) and the new
        mandates.

        Beside a shared archive the intents, the records (acknowledged in the state,
        published in the publisher's group commits), the mandates and the revision
        before the hot delete are one transaction: a crash leaves all of it or none, and
        the move waits on no object-store round trip.  Beside a local folder the records
        are appended after the intents commit, and the rest follows."""
        group = self._publisher.group
        settled: int | None = None
        with self._state.tx() as tx:
            now = time.time()
            written = self._journal.begin(tx, moves, still, now)
            if group and written:
                moved = {m.move_id for m in written}
                mine = [r for r in rows if r["record_id"] in moved]
                # the intents' revision is the one before the hot delete, too
                settled = self._settle(tx, written, mine, now, bump=False)
        self._crash("after_intent")
        if not written:
            return [], 0
        if settled is None:
            kept = {m.move_id for m in written}
            rows = [r for r in rows if r["record_id"] in kept]
        return written, self.complete(written, rows, settled)

    def complete(
        self,
        moves: Sequence[Move],
        rows: Sequence[dict[str, Any]],
        settled: int | None = None,
    ) -> int:
        """Finish moves from whatever step they reached (every step is idempotent);
        returns the new mandates.  ``settled``: the caller's transaction took the moves
        to ``mandated`` and wrote that many mandates."""
        if settled is None:
            settled = self._archive_and_release(moves, rows)
        else:
            self._publisher.queued()
            self._crash("after_cold")
        self._crash("after_mandates")
        self._hot_delete(moves)
        return settled

    def _archive_and_release(self, moves: Sequence[Move], rows: Sequence[dict[str, Any]]) -> int:
        """The moves' records into the archive, then one transaction for the moves
        ``archived`` and ``mandated``.  Beside a local folder, appended at once (a store
        that refuses them stops the moves).  Beside a shared Delta table, acknowledged
        in the state in that transaction and published in the publisher's group
        commits.  Either way a replayed move appends nothing twice (the batch, and the
        records, are named by the moves)."""
        group = self._publisher.group
        if not group:
            batch = hashlib.sha256("|".join(sorted(m.move_id for m in moves)).encode())
            self._cold.append(list(rows), batch=f"moves-{batch.hexdigest()[:32]}")
            self._crash("after_cold")
        with self._state.tx() as tx:
            mandates = self._settle(tx, moves, rows if group else None, time.time())
        if group:
            self._publisher.queued()
            self._crash("after_cold")
        return mandates

    def _settle(
        self,
        tx: Connection,
        moves: Sequence[Move],
        rows: Sequence[dict[str, Any]] | None,
        now: float,
        bump: bool = True,
    ) -> int:
        """Inside ``tx``: the records acknowledged (``rows``, beside a shared archive),
        the moves ``archived``; the credentials of those not yet past it released, with
        their mandates (``mandated``); and (``bump``, unless ``tx`` moved it already)
        the hot-index revision moved, as before every write to the hot index, since the
        hot delete comes next.  Returns the new mandates."""
        ids = [m.move_id for m in moves]
        statuses = self._journal.statuses(tx, ids)
        if rows is not None:
            self._publisher.queue(tx, rows, now, "tools", "record_id")
        self._journal.advance_in(tx, ids, "archived", now)
        fresh = [m for m in moves if statuses.get(m.move_id) in ("intent", "archived")]
        mandates = self._journal.release(tx, fresh, RELEASED, now) if fresh else 0
        if bump:
            self._state.revisions.bump_tools(tx)
        return mandates

    def _hot_delete(self, moves: Sequence[Move]) -> None:
        """The tools out of the hot index (verified), then one transaction: their
        records removed, the revision moved again, the moves ``done``."""
        tool_ids = [m.tool_id for m in moves]
        try:
            self._index().discard(tool_ids)
        except BaseException:
            # a write cut short still makes every reader of the index read it again
            with self._state.tx() as tx:
                self._state.revisions.bump_tools(tx)
            raise
        self._crash("after_hot_delete")
        pointers = {m.move_id: make_pointer("tools", m.move_id) for m in moves}
        with self._state.tx() as tx:
            self._state.tools.remove(tx, tool_ids)
            self._journal.finish_in(tx, moves, pointers, time.time())
        self._crash("after_done")
