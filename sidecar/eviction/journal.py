"""The move journal: write-ahead intents for hot -> cold moves, and what they left.

A move goes ``intent -> archived -> mandated -> deleted -> done``:

====================  =========================================================
status                meaning (what is true once it is recorded)
====================  =========================================================
``intent``            the tool's full hot record is captured here; nothing moved
``archived``          the record is in the cold ``tools`` table
``mandated``          its credentials left the active set; mandates written
``deleted``           the tool is gone from the hot index (verified)
``done``              ``evicted_tools`` names its cold pointer
====================  =========================================================

Every step is idempotent (cold appends skip stored keys, mandates are keyed, Chroma
deletes are verified), so recovery simply replays the steps after a move's status.  The
journal's rows are the :class:`~sidecar.storage.moves.MoveRepository`'s; this module
holds the steps that span it, the credentials and the revocation ledger.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from sidecar.model import CredentialRef
from sidecar.storage.base import Connection
from sidecar.storage.moves import EvictedTool as EvictedTool
from sidecar.storage.moves import Move as Move
from sidecar.storage.state import State


def move_id(tool_id: str, chain_ids: Iterable[str], generation: int) -> str:
    """Deterministic: the same decision on the same inputs names the same move."""
    payload = json.dumps([tool_id, sorted(chain_ids), generation], separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def mandate_key(move: str, ref: str) -> str:
    return hashlib.sha256(f"{move}|{ref}".encode()).hexdigest()[:32]


class Journal:
    def __init__(self, state: State) -> None:
        self._state = state
        self._moves = state.moves

    # ---- moves ---------------------------------------------------------------------------
    def write_intents(
        self,
        moves: Sequence[Move],
        still: Callable[[Any, list[str]], set[str]] | None = None,
    ) -> list[Move]:
        """Record the moves' intents, in one transaction; ``still(tx, tool_ids)``, read
        in that transaction, names the tools that may still move (usage that arrived
        since the decision keeps the others).  Returns the moves written."""
        with self._state.tx() as tx:
            return self.begin(tx, moves, still, time.time())

    def begin(
        self,
        tx: Connection,
        moves: Sequence[Move],
        still: Callable[[Any, list[str]], set[str]] | None,
        now: float,
    ) -> list[Move]:
        """:meth:`write_intents` inside ``tx``."""
        if still is not None:
            keep = still(tx, [m.tool_id for m in moves])
            moves = [m for m in moves if m.tool_id in keep]
        # from here on lookups withhold the tools: they read the set by this revision
        self._state.revisions.bump_tools(tx)
        self._moves.write_intents(tx, moves, now)
        return list(moves)

    def advance(self, move_ids: Sequence[str], status: str) -> None:
        """Move forward to ``status`` (never backward)."""
        with self._state.tx() as tx:
            self._moves.advance(tx, move_ids, status, time.time())

    def advance_in(self, tx: Connection, move_ids: Sequence[str], status: str, now: float) -> None:
        """:meth:`advance` inside ``tx``."""
        self._moves.advance(tx, move_ids, status, now)

    def statuses(self, tx: Connection, move_ids: Sequence[str]) -> dict[str, str]:
        """The moves' statuses, read inside ``tx``."""
        return self._moves.statuses(tx, move_ids)

    def unfinished(self) -> list[Move]:
        return self._moves.unfinished()

    def snapshot(self, move: str) -> dict[str, Any] | None:
        return self._moves.snapshot(move)

    def latest_move(self, tool_id: str) -> str | None:
        return self._moves.latest_move(tool_id)

    def status(self, move: str) -> str | None:
        return self._moves.status(move)

    def in_flight_tools(self) -> set[str]:
        return self._moves.in_flight_tools()

    def release_credentials(self, moves: Sequence[Move], reason: str) -> int:
        """One transaction: drop the moving tools' credential references from the active
        set, and write one mandate for each reference no remaining active tool uses.
        The mandate names every evicted tool that held the reference (whichever batch
        moved it) and the chains behind them.  Returns how many mandates were new."""
        with self._state.tx() as tx:
            return self.release(tx, moves, reason, time.time())

    def release(self, tx: Connection, moves: Sequence[Move], reason: str, now: float) -> int:
        """:meth:`release_credentials` inside ``tx``, and the moves ``mandated``: a
        statement for all the moves' references at each step, not one per reference."""
        batch = {m.move_id for m in moves}
        released: dict[str, CredentialRef] = {}
        holding: dict[str, list[Move]] = {}
        for m in moves:
            for cred in m.credentials():
                released.setdefault(cred.ref, cred)
                holding.setdefault(cred.ref, []).append(m)
        if released:
            self._moves.release(tx, [(ref, m) for ref, ms in holding.items() for m in ms])
        self._state.credentials.drop(tx, [m.tool_id for m in moves])
        used = self._state.credentials.in_use_of(tx, released) if released else set()
        orphaned = sorted(ref for ref in released if ref not in used)
        earlier = self._moves.holders(tx, orphaned) if orphaned else {}
        created = 0
        for ref in orphaned:
            owners = earlier[ref] + [
                (m.move_id, m.tool_id, list(m.chain_ids)) for m in holding[ref]
            ]
            first = min(mid for mid, _t, _c in owners if mid in batch)
            created += self._state.mandates.insert(
                tx,
                key=mandate_key(first, ref),
                tool_ids=sorted({t for _m, t, _c in owners}),
                move_id=first,
                chain_ids=sorted({c for _m, _t, cs in owners for c in cs}),
                credential=released[ref],
                reason=reason,
                now=now,
            )
        self._moves.advance(tx, [m.move_id for m in moves], "mandated", now)
        return created

    def finish(self, moves: Sequence[Move], pointers: dict[str, str]) -> None:
        with self._state.tx() as tx:
            self.finish_in(tx, moves, pointers, time.time())

    def finish_in(
        self, tx: Connection, moves: Sequence[Move], pointers: dict[str, str], now: float
    ) -> None:
        """:meth:`finish` inside ``tx``: the hot-index revision moves, the moves
        ``done``, their tools named in ``evicted_tools``."""
        self._state.revisions.bump_tools(tx)
        self._moves.finish(tx, moves, pointers, now)

    # ---- evicted tools and restores --------------------------------------------------------
    def evicted(self) -> dict[str, EvictedTool]:
        return self._moves.evicted()

    def generation(self, tool_id: str) -> int:
        return self._moves.generation(tool_id)

    def generations(self, tool_ids: Sequence[str]) -> dict[str, int]:
        return self._moves.generations(tool_ids)

    def restored_at(self) -> dict[str, float]:
        return self._moves.restored_at()

    def record_restore(
        self,
        tool: EvictedTool,
        reason: str,
        lifted: Sequence[str],
        credentials: Sequence[CredentialRef],
    ) -> None:
        now = time.time()
        with self._state.tx() as tx:
            self._state.revisions.bump_tools(tx)
            self._moves.record_restore(tx, tool, reason, lifted, now)
            # the credentials are in use again: revoking them now would break the tool
            self._state.mandates.cancel(
                tx, [c.ref for c in credentials], f"cancelled: {tool.tool_id} restored", now
            )
            self._state.credentials.replace(tx, tool.tool_id, credentials)

    def restores(self, tool_id: str) -> list[dict[str, Any]]:
        return self._moves.restores(tool_id)
