"""Membership: ``all`` / ``some`` / ``none`` of an argument's ids are among the ids a
collection field of another argument's object holds (``rel:{a}@{b}.{path}``: the items
of an exchange against the order's line items).
"""

from __future__ import annotations

from typing import ClassVar

from sidecar.memory.families.base import Call, Family, Features
from sidecar.memory.predicate import Predicate

_SHARE = {
    "all": "every value of {left} is",
    "some": "only some values of {left} are",
    "none": "no value of {left} is",
}


class Relation(Family):
    name: ClassVar[str] = "relation"
    rank: ClassVar[int] = 4
    prefixes: ClassVar[tuple[str, ...]] = ("rel",)

    def extract(self, call: Call, out: Features) -> None:
        for name, keys in call.keys_of.items():
            for other, view in call.views.items():
                if other == name:
                    continue
                for path, members in view.members.items():
                    hits = sum(k in members for k in keys)
                    verdict = "all" if hits == len(keys) else "some" if hits else "none"
                    out[f"rel:{name}@{other}.{path}"] = verdict

    def describe(self, predicate: Predicate) -> str:
        left, _, right = predicate.rest.partition("@")
        arg, _, path = right.partition(".")
        where = f"among the {path} of the object {arg} refers to"
        value = predicate.value
        if predicate.op == "not_in":
            succeeded = {str(v) for v in value}
            others = sorted(set(_SHARE) - succeeded)
            if len(others) == 1:
                return f"{_SHARE[others[0]].format(left=left)} {where}"
            if succeeded == {"all"}:
                return f"not every value of {left} is {where}"
            return f"{left} is {where} in a way never seen to succeed"
        share = _SHARE.get(str(value))
        return f"{share.format(left=left)} {where}" if share else f"{left} {where}: {value!r}"


FAMILY = Relation()
