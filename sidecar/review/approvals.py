"""Calls held for a person's approval.

A shell that holds a call (the gateway, by its approval policy) asks
:meth:`Approvals.request` each time the call is made: the first time it records a
pending approval and answers it; once an operator approved exactly that call (the same
tool, the same arguments by hash, asked by the same source) it answers ``approved``,
and an approval given for one call is used up by it.  A denied call stays denied.  An
operator decides with :meth:`Approvals.decide`, once for a pending approval; both the
request and the decision are the audit trail (who asked, who decided, when).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from sidecar.errors import InvalidInput, NotFound, RateLimited
from sidecar.storage.review import (
    APPROVAL_STATUSES,
    Approval,
    arguments_sha256,
    call_key,
)
from sidecar.storage.state import State
from sidecar.trust.redact import redact, redact_text

MAX_PENDING = 100
"""Calls one source may have waiting for approval at once (past it, 429)."""
MAX_FOR_S = 30 * 86_400.0
"""Longest time one approval may cover."""


class Approvals:
    def __init__(self, state: State, clock: Callable[[], float] = time.time) -> None:
        self._state = state
        self._clock = clock

    def request(self, tool: str, arguments: Mapping[str, Any], source: str, why: str) -> Approval:
        """The approval of this call: ``approved`` when it may run now (an approval for
        one call is used up), else ``pending`` (recorded the first time) or
        ``denied``.  A call still pending or denied is answered from a read alone; a
        write transaction is taken only to use an approval up or to record a new one."""
        digest = arguments_sha256(arguments)
        key = call_key(tool, digest, source)
        repo = self._state.review
        found = repo.latest(None, key)
        if found is not None and found.status in ("pending", "denied"):
            return found
        timed = found is not None and found.status == "approved" and found.until is not None
        if timed and found is not None and (found.until or 0) > self._clock():
            return found  # approved for a time: nothing to write
        with self._state.tx() as tx:
            now = self._clock()
            found = repo.latest(tx, key)  # again, under the lock: another may have used it
            if found is not None and found.status == "approved":
                if found.until is None:
                    repo.set_approval(tx, found.approval_id, "used")
                    return found
                if found.until > now:
                    return found
                repo.set_approval(tx, found.approval_id, "expired")
            elif found is not None and found.status in ("pending", "denied"):
                return found
            if repo.pending_of(tx, source) >= MAX_PENDING:
                raise RateLimited(
                    f"{source!r} has {MAX_PENDING} calls waiting for approval already; an "
                    "operator must decide some first"
                )
            shown = redact(dict(arguments))
            held = Approval(
                uuid.uuid4().hex[:16], tool, shown if isinstance(shown, dict) else {},
                source, redact_text(why[:2_000]), "pending", now,
            )  # fmt: skip
            repo.insert_approval(tx, key, digest, held)
            return held

    def decide(
        self, approval_id: str, approve: bool, by: str, for_s: float | None = None
    ) -> Approval:
        """Approve (for one call, or for ``for_s`` seconds) or deny a pending approval."""
        if for_s is not None and not 0 < for_s <= MAX_FOR_S:
            raise InvalidInput(f"for_s must be more than 0 and at most {MAX_FOR_S:.0f}")
        if for_s is not None and not approve:
            raise InvalidInput("for_s applies to an approval, not a denial")
        now = self._clock()
        with self._state.tx() as tx:
            repo = self._state.review
            found = repo.approval(approval_id, tx)
            if found is None:
                raise NotFound(f"no approval {approval_id!r}")
            if found.status != "pending":
                raise InvalidInput(f"approval {approval_id} is {found.status}, not pending")
            status = "approved" if approve else "denied"
            until = None if for_s is None else now + for_s
            repo.set_approval(tx, approval_id, status, (now, by), until)
        decided = self._state.review.approval(approval_id)
        assert decided is not None
        return decided

    def list(self, status: str | None = None, limit: int = 100) -> list[Approval]:
        if status is not None and status not in APPROVAL_STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(APPROVAL_STATUSES)}")
        return self._state.review.approvals(status, max(1, min(limit, 1_000)))
