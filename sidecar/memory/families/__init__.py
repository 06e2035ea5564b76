"""The condition families, one module each, found here rather than listed.

Every module of this package but :mod:`~sidecar.memory.families.base` defines one
:class:`~sidecar.memory.families.base.Family` subclass and an instance named ``FAMILY``;
the registry imports them all, in name order, and knows each family by its name and by
the feature prefixes it owns.  Adding a family is adding a module (and its test): its
features, candidates, words and tests of a predicate live there, and nothing else
changes.  Two families may not claim one prefix, nor one rank.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable

from sidecar.memory.families.base import Call, Family, Features, Variation, build_call


def discover(path: Iterable[str], package: str) -> list[Family]:
    """The ``FAMILY`` of every module of a package but ``base``, in module-name order."""
    found: list[Family] = []
    for info in sorted(pkgutil.iter_modules(list(path)), key=lambda m: m.name):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        family = getattr(module, "FAMILY", None)
        if not isinstance(family, Family):
            raise TypeError(f"{module.__name__} defines no FAMILY (a Family instance)")
        found.append(family)
    return found


def registry(found: Iterable[Family]) -> tuple[dict[str, Family], dict[str, Family]]:
    """The families by name, in rank order, and by feature prefix; two families may not
    share a name, a rank or a prefix."""
    by_name: dict[str, Family] = {}
    by_prefix: dict[str, Family] = {}
    for family in sorted(found, key=lambda f: f.rank):
        if family.name in by_name:
            raise ValueError(f"two condition families are named {family.name!r}")
        if any(f.rank == family.rank for f in by_name.values()):
            raise ValueError(f"two condition families have rank {family.rank}")
        by_name[family.name] = family
        for prefix in family.prefixes:
            if prefix in by_prefix:
                raise ValueError(f"two condition families claim the feature prefix {prefix!r}")
            by_prefix[prefix] = family
    return by_name, by_prefix


_FAMILIES, _BY_PREFIX = registry(discover(__path__, __name__))

FAMILIES: tuple[str, ...] = tuple(_FAMILIES)
"""The families' names, in rank order."""


def families() -> tuple[Family, ...]:
    """Every family, in rank order."""
    return tuple(_FAMILIES.values())


def family_for(feature: str) -> Family:
    """The family that owns a feature (``obj:order_id.status``, ``prior``)."""
    found = _BY_PREFIX.get(feature.split(":", 1)[0])
    if found is None:
        raise ValueError(f"unknown feature {feature!r}")
    return found


def family_of(feature: str) -> str:
    """The name of the family that owns a feature."""
    return family_for(feature).name


def family_named(name: str) -> Family:
    try:
        return _FAMILIES[name]
    except KeyError:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}") from None


__all__ = [
    "FAMILIES",
    "Call",
    "Family",
    "Features",
    "Variation",
    "build_call",
    "discover",
    "families",
    "family_for",
    "family_named",
    "family_of",
    "registry",
]
