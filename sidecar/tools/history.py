"""One tool's history, an operation of :class:`~sidecar.core.Sidecar` (inherited by it,
so that every shell calls it as it calls the rest of the library): where the tool is
now, every move and restore of it, its revocation mandates, the usage finished sessions
brought to it and the rules that name it (:class:`~sidecar.results.ToolHistory`).

Every part is one read of the state by the tool's id, and the rules once: a page per
tool, never a read per row of a list."""

from __future__ import annotations

from typing import Any

from indexes import IndexRecord
from sidecar import validate
from sidecar.boundary import boundary
from sidecar.errors import NotFound
from sidecar.eviction.revocation import Ledger
from sidecar.model import Tool
from sidecar.results import ToolHistory, ToolMove, ToolRestore, ToolUsage
from sidecar.rules import Rules
from sidecar.storage.moves import EvictedTool, Move
from sidecar.storage.state import State
from sidecar.tools.active import Tools
from sidecar.tools.records import tool_from_record


class ToolHistories:
    """A tool's history, as an operation of the library."""

    state: State
    tools: Tools
    ledger: Ledger
    rules: Rules

    @boundary
    def tool_history(self, tool_id: str) -> ToolHistory:
        """Where ``tool_id`` is now (hot, moving, cold or gone), its moves and restores
        (newest first), its revocation mandates, the sessions its kept usage requests
        count by source and outcome, and the rules that name it, whatever their status;
        :class:`~sidecar.errors.NotFound` for a tool neither active nor ever moved."""
        name = validate.check_tool_id(tool_id)
        moves = [_move(m) for m in self.state.moves.moves_of(name)]
        active = self.tools.get([name]).get(name)
        if active is None and not moves:
            raise NotFound(f"{name!r} is neither an active tool nor one ever evicted")
        evicted = self.state.moves.evicted().get(name)
        restores = [_restore(r) for r in reversed(self.state.moves.restores(name))]
        usage = [ToolUsage(*t) for t in self.state.requests.tally(name)]
        return ToolHistory(
            tool_id=name,
            state=_state(name, active, evicted, self.state.moves.in_flight_tools()),
            tool=active or (self._captured(moves[0].move_id) if moves else None),
            evicted_at=evicted.evicted_at if evicted else None,
            move_id=evicted.move_id if evicted else None,
            pointer=evicted.pointer if evicted else None,
            moves=tuple(moves),
            restores=tuple(restores),
            mandates=tuple(m for m in self.ledger.mandates() if name in m.tool_ids),
            usage=tuple(usage),
            completed_chains=self.state.uses.completed_chain_count(name),
            rules=tuple(v for v in self.rules.views(True) if name in v.sequence),
        )

    def _captured(self, move_id: str) -> Tool | None:
        """The definition a move captured at its intent (credentials included)."""
        found = self.state.moves.snapshot(move_id)
        if found is None:
            return None
        snap, tool_id = found["snapshot"], found["tool_id"]
        record = IndexRecord(tool_id, snap.get("document", ""), snap.get("metadata", {}))
        captured = Move(move_id, tool_id, found["status"], snap, ())
        return tool_from_record(record, captured.credentials())


def _state(name: str, active: Tool | None, evicted: EvictedTool | None, moving: set[str]) -> str:
    if name in moving:
        return "moving"
    if evicted is not None:
        return "cold"
    return "hot" if active is not None else "gone"


def _move(row: dict[str, Any]) -> ToolMove:
    return ToolMove(
        row["move_id"],
        row["status"],
        tuple(row["chain_ids"]),
        row["created_at"],
        row["updated_at"],
    )


def _restore(row: dict[str, Any]) -> ToolRestore:
    return ToolRestore(row["move_id"], row["reason"], tuple(row["lifted"]), row["restored_at"])


__all__ = ["ToolHistories"]
