"""The eviction engine: which prefix tools leave the hot index, and moving them safely.

**Decision** (PRODUCT.md steps 3 and 4).  For every prefix tool of every active
constraint (an abandoned chain):

- *keep* it when an operator pinned it, when a completed chain used it, when an
  operator restored it after every chain that drives it was archived, or when fewer
  than ``min_chains`` distinct abandoned chains drive it (``SIDECAR_EVICT_MIN_CHAINS``,
  default 2); the chain's constraint stays active in lookup and checks;
- *evict* it otherwise: all of its appearances are inside abandoned chains, and the
  dead end has been met more than once.

Why two chains by default: "appears only in abandoned chains" judged from a single
chain is judged from whatever history happens to exist, and on real trajectories it
evicts tools that other tasks need (BENCHMARKS.md: one chain cost 3.7-4.5% of viable
recall; the constraints alone already stop every re-assembly).  The same reasoning
makes an unknown failure kind wait for a second sighting before it is archived.

The decision is a pure function of the archive, the usage evidence and the pins, so it
is deterministic, and a tool that became reusable is simply kept by the next run.

**Moves** are journaled (:mod:`sidecar.journal`) in batches under the single-writer
lock: intent -> cold append -> mandates -> verified hot delete -> done.  A crash at any
step is finished by :meth:`Evictor.recover` (run on the next eviction, or by
``sidecar evict --recover``): every tool ends in exactly one store, no cold row is
written twice, every mandate exists once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from cold_store import make_pointer
from sidecar.journal import Journal, Move, move_id
from sidecar.lock import WriterLock
from sidecar.model import ArchivedConstraint
from sidecar.settings import CRASH_POINTS, DEFAULT_EVICT_MIN_CHAINS

if TYPE_CHECKING:
    from sidecar.app import Sidecar

RECORD_VERSION = 1


@dataclass(frozen=True)
class ToolDecision:
    tool_id: str
    action: Literal["evict", "keep"]
    reason: str
    chains: tuple[str, ...]
    """The abandoned chains in which the tool is a prefix tool (what drove the decision)."""
    completed_chains: int = 0
    pinned: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_id": self.tool_id,
            "action": self.action,
            "reason": self.reason,
            "chains": list(self.chains),
            "completed_chains": self.completed_chains,
            "pinned": self.pinned,
        }


def decide(
    constraints: Iterable[ArchivedConstraint],
    active: set[str],
    pinned: set[str],
    completed: Mapping[str, int],
    restored_at: Mapping[str, float],
    min_chains: int = DEFAULT_EVICT_MIN_CHAINS,
) -> list[ToolDecision]:
    """One decision per prefix tool that is in the hot index, sorted by tool id.

    After an operator's restore, only chains archived since count toward
    ``min_chains``: the restore says the old evidence no longer holds."""
    if min_chains < 1:
        raise ValueError(f"min_chains must be at least 1, got {min_chains}")
    drivers: dict[str, list[ArchivedConstraint]] = {}
    for c in constraints:
        for tool in dict.fromkeys(c.prefix):
            drivers.setdefault(tool, []).append(c)
    decisions: list[ToolDecision] = []
    for tool in sorted(drivers):
        if tool not in active:
            continue
        chains = tuple(sorted(c.chain_id for c in drivers[tool]))
        uses = completed.get(tool, 0)
        latest = max(c.archived_at for c in drivers[tool])
        if tool in pinned:
            decisions.append(
                ToolDecision(tool, "keep", "pinned by an operator", chains, uses, True)
            )
        elif uses:
            decisions.append(
                ToolDecision(tool, "keep", f"reused by {uses} completed chain(s)", chains, uses)
            )
        elif tool in restored_at and restored_at[tool] >= latest:
            decisions.append(
                ToolDecision(tool, "keep", "restored by an operator after its chains", chains)
            )
        elif (
            counted := sum(
                tool not in restored_at or c.archived_at > restored_at[tool] for c in drivers[tool]
            )
        ) < min_chains:
            since = " since its restore" if tool in restored_at else ""
            decisions.append(
                ToolDecision(
                    tool,
                    "keep",
                    f"drives {counted} abandoned chain(s){since}; eviction needs {min_chains}",
                    chains,
                )
            )
        else:
            decisions.append(
                ToolDecision(tool, "evict", "appears only in abandoned chains", chains)
            )
    return decisions


@dataclass(frozen=True)
class EvictionReport:
    dry_run: bool
    evicted: tuple[ToolDecision, ...]
    kept: tuple[ToolDecision, ...]
    mandates: int
    reclaimed: Mapping[str, Any]
    recovered_moves: int
    duration_s: float
    pointers: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "evicted": [
                {**d.to_dict(), "pointer": self.pointers.get(d.tool_id)} for d in self.evicted
            ],
            "kept_with_constraint": [d.to_dict() for d in self.kept],
            "mandates": self.mandates,
            "reclaimed": dict(self.reclaimed),
            "recovered_moves": self.recovered_moves,
            "duration_s": round(self.duration_s, 3),
        }


_WORDPIECE = re.compile(r"\w+|[^\w\s]")


class Evictor:
    """Runs decisions and moves for one :class:`~sidecar.app.Sidecar`."""

    def __init__(
        self,
        sidecar: Sidecar,
        crash_at: str | None = None,
        batch_size: int = 500,
        crash_hook: Callable[[str], None] | None = None,
    ) -> None:
        self._sc = sidecar
        self._journal = Journal(sidecar.state)
        self._crash_at = crash_at
        self._crash_hook = crash_hook
        self._batch = batch_size
        self.lock = WriterLock(sidecar.settings.home / "evict.lock")

    # ---- decision -----------------------------------------------------------------
    def decide(self, min_chains: int | None = None) -> list[ToolDecision]:
        """The decision for every prefix tool in the hot index; ``min_chains``
        overrides the ``evict_min_chains`` setting for this call."""
        sc = self._sc
        need = sc.settings.evict_min_chains if min_chains is None else min_chains
        constraints = sc.state.active_constraints()
        candidates = {t for c in constraints for t in c.prefix}
        records = sc.index.get(candidates) if candidates else {}
        pinned = {i for i, r in records.items() if r.metadata.get("pinned")}
        completed = {t: sc.state.completed_chain_count(t) for t in records}
        return decide(
            constraints, set(records), pinned, completed, self._journal.restored_at(), need
        )

    # ---- runs ---------------------------------------------------------------------
    def run(
        self,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
        min_chains: int | None = None,
    ) -> EvictionReport:
        started = time.perf_counter()
        with self.lock:
            recovered = 0 if dry_run else self._recover_locked()
            decisions = self.decide(min_chains)
            evict = [d for d in decisions if d.action == "evict"]
            kept = tuple(d for d in decisions if d.action == "keep")
            reclaimed = {"tools": 0, "schema_bytes": 0, "schema_tokens": 0}
            pointers: dict[str, str] = {}
            mandates = 0
            done = 0
            for start in range(0, len(evict), self._batch):
                batch = evict[start : start + self._batch]
                moves = self._intents(batch)
                rows = [self._cold_row(m) for m in moves]
                for row in rows:
                    reclaimed["tools"] += 1
                    reclaimed["schema_bytes"] += row["schema_bytes"]
                    reclaimed["schema_tokens"] += row["schema_tokens"]
                if not dry_run:
                    self._journal.write_intents(moves)
                    self._crash("after_intent")
                    mandates += self._complete(moves, rows)
                    pointers.update({m.tool_id: make_pointer("tools", m.move_id) for m in moves})
                done += len(batch)
                if progress is not None:
                    progress(done, len(evict))
        reclaimed["tokenizer"] = self._tokenizer_name()
        return EvictionReport(
            dry_run,
            tuple(evict),
            kept,
            mandates,
            reclaimed,
            recovered,
            time.perf_counter() - started,
            pointers,
        )

    def recover(self) -> int:
        """Finish every journaled move a crash interrupted; returns how many."""
        with self.lock:
            return self._recover_locked()

    def _recover_locked(self) -> int:
        moves = self._journal.unfinished()
        if moves:
            self._complete(moves, [self._cold_row(m) for m in moves])
        return len(moves)

    # ---- the move protocol --------------------------------------------------------
    def _intents(self, batch: Sequence[ToolDecision]) -> list[Move]:
        sc = self._sc
        ids = [d.tool_id for d in batch]
        records = sc.index.get(ids)
        creds = sc.state.credentials(ids)
        moves = []
        for d in batch:
            rec = records.get(d.tool_id)
            if rec is None:
                continue  # gone since the decision; nothing to move
            snapshot = {
                "document": rec.document,
                "metadata": dict(rec.metadata),
                "credentials": [c.to_dict() for c in creds.get(d.tool_id, [])],
                "decision": d.to_dict(),
            }
            mid = move_id(d.tool_id, d.chains, self._journal.generation(d.tool_id))
            moves.append(Move(mid, d.tool_id, "intent", snapshot, d.chains))
        return moves

    def _complete(self, moves: Sequence[Move], rows: Sequence[dict[str, Any]]) -> int:
        sc = self._sc
        ids = [m.move_id for m in moves]
        sc.cold.tools.append(list(rows))
        self._crash("after_cold")
        self._journal.advance(ids, "archived")
        fresh = [m for m in moves if self._journal.status(m.move_id) in ("intent", "archived")]
        mandates = self._journal.release_credentials(
            fresh, "credential no longer used by any active tool after eviction"
        )
        self._crash("after_mandates")
        sc.state.bump_tools_revision()
        try:
            sc.index.delete([m.tool_id for m in moves])
        finally:
            sc.state.bump_tools_revision()
        self._crash("after_hot_delete")
        self._journal.advance(ids, "deleted")
        self._journal.finish(moves, {m.move_id: make_pointer("tools", m.move_id) for m in moves})
        self._crash("after_done")
        return mandates

    def _cold_row(self, move: Move) -> dict[str, Any]:
        snap = move.snapshot
        meta = dict(snap["metadata"])
        schema = json.loads(str(meta.get("input_schema", "{}")))
        shown = json.dumps(
            {
                "name": move.tool_id,
                "description": meta.get("description", ""),
                "inputSchema": schema,
            }
        )
        now = datetime.now(UTC)
        return {
            "record_id": move.move_id,
            "archive_date": now.date().isoformat(),
            "evicted_at": now,
            "tool_id": move.tool_id,
            "tool_type": str(meta.get("tool_type", "unspecified")),
            "description": str(meta.get("description", "")),
            "document": snap["document"],
            "input_schema_json": json.dumps(schema, sort_keys=True),
            "metadata_json": json.dumps(meta, sort_keys=True),
            "credentials_json": json.dumps(snap["credentials"], sort_keys=True),
            "chain_ids": list(move.chain_ids),
            "decision_json": json.dumps(snap["decision"], sort_keys=True),
            "schema_bytes": len(shown.encode("utf-8")),
            "schema_tokens": self._count_tokens(shown),
            "record_version": RECORD_VERSION,
        }

    def _count_tokens(self, text: str) -> int:
        counter = getattr(self._sc.embedder, "tokenizer_count", None)
        if counter is not None:
            return int(counter(text))
        return len(_WORDPIECE.findall(text))

    def _tokenizer_name(self) -> str:
        embedder = self._sc.embedder
        if hasattr(embedder, "tokenizer_count"):
            return f"{embedder.name} tokenizer"
        return "approximate (words and punctuation)"

    def _crash(self, point: str) -> None:
        assert point in CRASH_POINTS
        if self._crash_hook is not None:
            self._crash_hook(point)
        if self._crash_at == point:
            os.kill(os.getpid(), signal.SIGKILL)
