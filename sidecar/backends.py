"""What the CLI talks to: the library in this process, or a running sidecar over HTTP.

Both answer with the same plain dicts (the library's ``to_dict()`` forms), so the CLI
formats one shape whichever it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from sidecar.model import Tool

if TYPE_CHECKING:
    from sidecar.app import Sidecar
    from sidecar.client import RemoteSidecar


class Backend(Protocol):
    def close(self) -> None: ...
    def add_tools(self, tools: Sequence[Tool]) -> dict[str, Any]: ...
    def list_tools(self) -> dict[str, Any]: ...
    def search(
        self, query: str, k: int, after: list[str], context: dict[str, Any]
    ) -> dict[str, Any]: ...
    def report_many(self, reports: list[Any]) -> list[dict[str, Any]]: ...
    def check(self, plan: list[str], mode: str, context: dict[str, Any]) -> dict[str, Any]: ...
    def audit(self, pointer: str) -> dict[str, Any]: ...
    def digest(self) -> dict[str, Any]: ...
    def status(self) -> dict[str, Any]: ...
    def evict(
        self,
        dry_run: bool,
        progress: Callable[[int, int], None] | None,
        min_chains: int | None = None,
    ) -> dict[str, Any]: ...
    def recover(self) -> dict[str, Any]: ...
    def restore(self, tool_id: str, reason: str, lift: bool) -> dict[str, Any]: ...
    def revocations(self, status: str | None) -> dict[str, Any]: ...
    def run_revocations(self) -> dict[str, Any]: ...
    def constraints(self, include_lifted: bool) -> dict[str, Any]: ...
    def lift(self, chain_id: str, reason: str, reinstate: bool) -> dict[str, Any]: ...


class Local:
    def __init__(self, sc: Sidecar) -> None:
        self.sc = sc

    def close(self) -> None:
        self.sc.close()

    def add_tools(self, tools: Sequence[Tool]) -> dict[str, Any]:
        return self.sc.add_tools(tools).to_dict()

    def list_tools(self) -> dict[str, Any]:
        return {"tools": [t.to_dict() for t in self.sc.list_tools()]}

    def search(
        self, query: str, k: int, after: list[str], context: dict[str, Any]
    ) -> dict[str, Any]:
        return self.sc.search(query, k=k, after=after, context=context).to_dict()

    def report_many(self, reports: list[Any]) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.sc.report_many(reports)]

    def check(self, plan: list[str], mode: str, context: dict[str, Any]) -> dict[str, Any]:
        return self.sc.check(plan, mode=mode, context=context).to_dict()  # type: ignore[arg-type]

    def audit(self, pointer: str) -> dict[str, Any]:
        return self.sc.audit(pointer)

    def digest(self) -> dict[str, Any]:
        return {"digest": self.sc.digest(), "chains": self.sc.cold.chains.count()}

    def status(self) -> dict[str, Any]:
        return status_of(self.sc)

    def evict(
        self,
        dry_run: bool,
        progress: Callable[[int, int], None] | None,
        min_chains: int | None = None,
    ) -> dict[str, Any]:
        return self.sc.evict(dry_run=dry_run, progress=progress, min_chains=min_chains).to_dict()

    def recover(self) -> dict[str, Any]:
        return {"recovered_moves": self.sc.recovered_on_open + self.sc.recover()}

    def restore(self, tool_id: str, reason: str, lift: bool) -> dict[str, Any]:
        return self.sc.restore(tool_id, reason, lift_constraints=lift).to_dict()

    def revocations(self, status: str | None) -> dict[str, Any]:
        return {"mandates": [m.to_dict() for m in self.sc.ledger.list(status)]}

    def run_revocations(self) -> dict[str, Any]:
        return {"revoker": self.sc.settings.revoker, "results": self.sc.run_revocations()}

    def constraints(self, include_lifted: bool) -> dict[str, Any]:
        return {"constraints": self.sc.state.constraint_rows(include_lifted=include_lifted)}

    def lift(self, chain_id: str, reason: str, reinstate: bool) -> dict[str, Any]:
        if reinstate:
            self.sc.reinstate(chain_id, reason)
        else:
            self.sc.lift(chain_id, reason)
        return {"chain_id": chain_id, "status": "active" if reinstate else "lifted"}


def status_of(sc: Sidecar) -> dict[str, Any]:
    return {
        "chains": sc.cold.chains.count(),
        "active_constraints": len(sc.matcher()),
        "evicted_tools": len(sc.journal.evicted()),
        "quarantined": [
            {"file": q.name, "path": str(q.path), "reason": q.reason} for q in sc.quarantined()
        ],
    }


class Remote:
    def __init__(self, client: RemoteSidecar) -> None:
        self.c = client

    def close(self) -> None:
        self.c.close()

    def add_tools(self, tools: Sequence[Tool]) -> dict[str, Any]:
        return self.c.call("POST", "/v1/tools", json={"tools": [t.to_dict() for t in tools]})

    def list_tools(self) -> dict[str, Any]:
        return self.c.call("GET", "/v1/tools")

    def search(
        self, query: str, k: int, after: list[str], context: dict[str, Any]
    ) -> dict[str, Any]:
        body = {"query": query, "k": k, "after": after, "context": context}
        return self.c.call("POST", "/v1/search", json=body)

    def report_many(self, reports: list[Any]) -> list[dict[str, Any]]:
        return self.c.call("POST", "/v1/reports", json={"reports": reports})["results"]

    def check(self, plan: list[str], mode: str, context: dict[str, Any]) -> dict[str, Any]:
        return self.c.call(
            "POST", "/v1/check", json={"plan": plan, "mode": mode, "context": context}
        )

    def audit(self, pointer: str) -> dict[str, Any]:
        return self.c.call("GET", "/v1/audit", params={"pointer": pointer})

    def digest(self) -> dict[str, Any]:
        return self.c.call("GET", "/v1/archive/digest")

    def status(self) -> dict[str, Any]:
        return self.c.call("GET", "/v1/archive/status")

    def evict(
        self,
        dry_run: bool,
        progress: Callable[[int, int], None] | None,
        min_chains: int | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"dry_run": dry_run}
        if min_chains is not None:
            body["min_chains"] = min_chains
        return self.c.call("POST", "/v1/evictions", json=body)

    def recover(self) -> dict[str, Any]:
        return self.c.call("POST", "/v1/evictions/recover")

    def restore(self, tool_id: str, reason: str, lift: bool) -> dict[str, Any]:
        body = {"reason": reason, "lift_constraints": lift}
        return self.c.call("POST", f"/v1/tools/{tool_id}/restore", json=body)

    def revocations(self, status: str | None) -> dict[str, Any]:
        return self.c.call("GET", "/v1/revocations", params={"status": status} if status else {})

    def run_revocations(self) -> dict[str, Any]:
        return self.c.call("POST", "/v1/revocations/run")

    def constraints(self, include_lifted: bool) -> dict[str, Any]:
        return self.c.call("GET", "/v1/constraints", params={"include_lifted": include_lifted})

    def lift(self, chain_id: str, reason: str, reinstate: bool) -> dict[str, Any]:
        action = "reinstate" if reinstate else "lift"
        return self.c.call("POST", f"/v1/constraints/{chain_id}/{action}", json={"reason": reason})
