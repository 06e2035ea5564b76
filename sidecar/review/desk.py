"""The review desk's operations of :class:`~sidecar.core.Sidecar` (inherited by it, so
that every shell calls them as it calls the rest of the library): calls held for
approval and appeals against blocks, each attributed to who asked and who decided."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sidecar import validate
from sidecar.errors import InvalidInput
from sidecar.review.appeals import Appeals
from sidecar.review.approvals import Approvals
from sidecar.storage.review import Appeal, Approval
from sidecar.trust.principals import LOCAL


class ReviewDesk:
    """What waits for a person, as operations of the library."""

    _approvals: Approvals
    _appeals: Appeals

    def request_approval(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        source: str = LOCAL,
        why: str = "",
    ) -> Approval:
        """Hold the call of ``tool`` with exactly ``arguments`` for an operator's
        approval: ``approved`` when it may run now (an approval for one call is used up
        by it), else ``pending`` (recorded the first time) or ``denied``."""
        validate.check_tool_id(tool)
        args = _arguments(arguments)
        if not isinstance(why, str):
            raise InvalidInput("why must be a string")
        return self._approvals.request(tool, args, source, why)

    def approvals(self, status: str | None = None, limit: int = 100) -> list[Approval]:
        """Calls held for approval, newest first (all, or those with ``status``)."""
        return self._approvals.list(status, limit)

    def approve(self, approval_id: str, for_s: float | None = None, *, by: str = LOCAL) -> Approval:
        """Let the held call run: once, or as often as it is made for ``for_s`` seconds."""
        return self._approvals.decide(_id(approval_id, "approval_id"), True, by, for_s)

    def deny(self, approval_id: str, *, by: str = LOCAL) -> Approval:
        """Refuse the held call (it stays refused)."""
        return self._approvals.decide(_id(approval_id, "approval_id"), False, by)

    def appeal(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        reason: str = "",
        constraint_ids: Sequence[str] = (),
        *,
        source: str = LOCAL,
    ) -> Appeal:
        """Contest a block: the call that was refused, the rules that refused it and why
        the agent believes them wrong, for an operator to judge."""
        validate.check_tool_id(tool)
        if isinstance(constraint_ids, str) or not isinstance(constraint_ids, Sequence):
            raise InvalidInput("constraint_ids must be a list of constraint ids")
        return self._appeals.file(tool, _arguments(arguments), reason, constraint_ids, source)

    def appeals(self, status: str | None = None, limit: int = 100) -> list[Appeal]:
        """Agents' appeals, newest first (all, or those with ``status``)."""
        return self._appeals.list(status, limit)

    def close_appeal(self, appeal_id: str, granted: bool, *, by: str = LOCAL) -> Appeal:
        """Close an open appeal: ``granted`` or upheld (the block stays).  Closing records
        the decision; lifting the rule or approving the call is what acts on it."""
        if not isinstance(granted, bool):
            raise InvalidInput("granted must be true or false")
        return self._appeals.close(_id(appeal_id, "appeal_id"), granted, by)


def _arguments(arguments: Mapping[str, Any] | None) -> dict[str, Any]:
    if arguments is None:
        return {}
    if not isinstance(arguments, Mapping):
        raise InvalidInput("arguments must be an object")
    validate.check_json_value(arguments, "arguments")
    return dict(arguments)


def _id(value: object, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 64:
        raise InvalidInput(f"{where} must be a non-empty string of at most 64 characters")
    return value
