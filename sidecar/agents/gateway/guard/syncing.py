"""Keeping the gateway's catalog and the backend's hot index in step with the upstreams.

Upstream listings are synced into the backend at start, when an upstream announces
``tools/list_changed`` (or comes back after a break), and on a downstream ``tools/list``
once ``refresh_s`` has passed since the last full sync.  At start a failure stops the
gateway (it cannot serve without its memory); later, a listing or a sync that fails is
logged and retried next time, and the tools are listed and guarded all the same.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

import anyio

from sidecar.agents.gateway.errors import UpstreamUnavailable
from sidecar.agents.gateway.guard.backend import GatewayBackend
from sidecar.agents.gateway.guard.workers import GatewayStats, Workers
from sidecar.agents.gateway.proxy.catalog import Catalog
from sidecar.agents.gateway.proxy.upstream import UpstreamLink

log = logging.getLogger("sidecar.agents.gateway")


class CatalogSync:
    def __init__(
        self,
        catalog: Catalog,
        links: Mapping[str, UpstreamLink],
        backend: GatewayBackend,
        run: tuple[Workers, GatewayStats],
        refresh_s: float,
        announce: Callable[[], Awaitable[None]],
    ) -> None:
        """``announce``: tell the clients the list changed (after a sync that was not
        the first)."""
        self._catalog = catalog
        self._links = links
        self._backend = backend
        self._workers, self._stats = run
        self.refresh_s = refresh_s
        self._announce = announce
        self._dirty: set[str] = set()
        self._last = float("-inf")
        self._lock = anyio.Lock()

    def changed(self, upstream: str) -> None:
        """``upstream`` announced a change: it is listed again on the next sync."""
        self._dirty.add(upstream)

    async def sync(self, force: bool = False) -> list[str]:
        """Re-list the upstreams that changed (all of them when ``force`` or when
        ``refresh_s`` has passed) and sync the catalogs that moved; returns their names."""
        async with self._lock:
            stale = anyio.current_time() - self._last >= self.refresh_s
            todo = set(self._links) if force or stale else set(self._dirty)
            if not todo:
                return []
            self._dirty -= todo
            for name in sorted(todo):
                await self._list(name, force)
            if todo == set(self._links):
                self._last = anyio.current_time()
            changed = self._catalog.changed_sources()
            for source in changed:
                await self._push(source, force)
        if changed and not force:
            await self._announce()
        return changed

    async def _list(self, name: str, force: bool) -> None:
        try:
            self._catalog.update(name, await self._links[name].list_tools())
        except Exception as exc:
            if force:
                raise UpstreamUnavailable(name, str(exc)[:300]) from exc
            log.warning('{"event": "list_failed", "upstream": "%s"}', name)

    async def _push(self, source: str, force: bool) -> None:
        definitions = self._catalog.definitions(source)
        try:
            await self._workers.write(self._backend.sync_tools, source, definitions)
        except Exception as exc:
            if force:
                raise  # at start: the gateway cannot serve without its memory
            self._stats.sync_failures += 1
            log.warning(
                '{"event": "sync_failed", "upstream": "%s", "type": "%s"}',
                source,
                type(exc).__name__,
            )
            return
        self._catalog.mark_synced(source, definitions)
        self._stats.syncs += 1
