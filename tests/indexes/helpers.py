"""Helpers for the active-index tests."""

from __future__ import annotations

from typing import Any


class CallRecorder:
    """Pass-through wrapper around the *real* Chroma collection.

    Every call still goes to Chroma; the wrapper only records how many ids (for a paged
    ``get`` the ``limit``, for a ``query`` the ``n_results``) each call carried.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def _record(self, op: str, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("ids")
        size = len(ids) if ids is not None else int(kwargs.get("limit") or 0)
        self.calls.append((op, size))

    def upsert(self, **kwargs: Any) -> Any:
        self._record("upsert", kwargs)
        return self._inner.upsert(**kwargs)

    def get(self, **kwargs: Any) -> Any:
        self._record("get", kwargs)
        return self._inner.get(**kwargs)

    def delete(self, **kwargs: Any) -> Any:
        self._record("delete", kwargs)
        return self._inner.delete(**kwargs)

    def query(self, **kwargs: Any) -> Any:
        self.calls.append(("query", int(kwargs["n_results"])))
        return self._inner.query(**kwargs)

    def sizes(self, op: str) -> list[int]:
        return [n for name, n in self.calls if name == op]
