"""Lookups: ranking the active tools for a request, with the rules applied
(:class:`~sidecar.lookup.search.Lookup`)."""

from sidecar.lookup.search import Lookup

__all__ = ["Lookup"]
