"""The earlier steps of a running session, indexed once so that a check before the next
call costs dictionary look-ups, not a re-parse of every output.

Two indexes are kept, both fed by each step as it is added:

- *grounding*: every scalar of every earlier output and argument (and the keys of
  id-keyed maps), plus the free texts (task input, text outputs, error texts) for a
  substring search: is a value something the session has seen?
- *bindings*: for an id-like value, the objects (dicts) of earlier outputs that hold it,
  ranked by how surely the value is the object's identity rather than a reference:

  1. a map keyed by the value (``{"skus": {"55501": {...}}}``: the inner dict),
  2. the object's first field (``{"invoice_id": "#INV1", ...}``), or a field named like
     the argument the value is passed in (``sku_ids`` -> ``sku_id``),
  3. a field named ``id`` or ending in ``id``,
  4. any other field (a reference: ``{"account_id": ...}`` in a transfer record).

  The best rank wins, and within a rank the latest output, so a call is tied to the
  latest state of the object it acts on (an invoice's state after an earlier write).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

from sidecar.memory.evidence import Step, decoded
from sidecar.memory.values import ID_TOKEN, Scalar, is_id_like, is_scalar, key_of

MAX_TEXT_BLOBS = 64
MAX_MAP_KEYS = 16
"""A map field with more keys than this is a collection, not a set of options."""


@dataclass(frozen=True)
class ObjectView:
    """The parts of a bound object the features read."""

    scalars: Mapping[str, Scalar]
    """Top-level scalar fields (the state of the object; nested descriptors such as an
    address or an option set are left out: they match by coincidence far more often
    than they explain a failure)."""
    sizes: Mapping[str, int]
    """Lengths of list and map fields (``line_items``)."""
    members: Mapping[str, frozenset[str]]
    """Id-like values found in collection fields, by path: ``line_items[].sku_id``,
    ``accounts{}`` (the keys of a map), ``tags[]``."""
    maps: Mapping[str, Mapping[str, Scalar]] = dc_field(default_factory=dict)
    """Map fields whose values are scalars, by field: ``prices`` -> ``{"economy": 120}``
    (read through an argument that names one of the keys: a cabin, a currency)."""


def call_digest(tool: str, arguments: Mapping[str, Any]) -> str:
    """A call's identity: its tool and its arguments, however their keys were ordered."""
    text = json.dumps([tool, arguments], sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def singular(name: str) -> str:
    if name.endswith("ies") and len(name) > 4:
        return name[:-3] + "y"
    if name.endswith("s") and not name.endswith("ss") and len(name) > 2:
        return name[:-1]
    return name


def _id_named(key: str) -> bool:
    low = key.lower()
    return low == "id" or low.endswith("_id") or low.endswith("id")


class Trace:
    """An append-only index of a session's steps (see the module docstring)."""

    def __init__(self, steps: Iterable[Step] = (), task_input: str | None = None) -> None:
        self.steps: list[Step] = []
        self.task_input = task_input
        self._seen: set[str] = set()
        self._texts: list[str] = []
        # value -> {slot: (rank, seq, key, obj)}; slot is "1", "2" or a field name
        self._bind: dict[str, dict[str, tuple[int, int, str, dict[str, Any]]]] = {}
        self._views: dict[int, ObjectView] = {}
        self._identified: list[dict[str, Any]] = []
        """Objects some value is the identity of (rank 1 or 2), in order; their fields
        are indexed for lookups only when first asked for."""
        self._fields: set[tuple[str, str]] = set()
        self._fields_done = 0
        self.failed: dict[str, list[int]] = {}
        """Tool -> positions of its failed steps."""
        self.succeeded: dict[str, int] = {}
        """Tool -> position of its first successful step."""
        self._done: set[str] = set()
        """Digests of the calls (tool and arguments) that succeeded."""
        self.numbers: dict[str, float] = {}
        """Field name -> the latest number an earlier output gave it, the most recently
        given last (a balance fetched before the call)."""
        for step in steps:
            self.add(step)

    def __len__(self) -> int:
        return len(self.steps)

    # ---- intake ---------------------------------------------------------------------
    def add(self, step: Step, own: bool = True) -> None:
        """Index ``step``; ``own=False``: for what it showed only (a step that is context,
        whose tool the calls after it are not told of)."""
        seq = len(self.steps)
        self.steps.append(step)
        self._ground_value(step.arguments)
        if step.error is not None:
            if own:
                self.failed.setdefault(step.tool, []).append(seq)
            self._text(step.error)
        elif own:
            self.succeeded.setdefault(step.tool, seq)
            self._done.add(call_digest(step.tool, step.arguments))
        output = decoded(step.output)
        if isinstance(output, str):
            self._text(output)
        elif isinstance(output, dict | list):
            self._walk(output, seq)
        else:
            key = key_of(output)
            if key is not None:
                self._seen.add(key)

    def done_before(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        """Whether this very call (the tool, with the same arguments) succeeded earlier."""
        return call_digest(tool, arguments) in self._done

    def _text(self, text: str) -> None:
        if text and len(self._texts) < MAX_TEXT_BLOBS:
            self._texts.append(text)

    def _ground_value(self, value: Any) -> None:
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, Mapping):
                stack.extend(item.values())
            elif isinstance(item, list | tuple):
                stack.extend(item)
            else:
                key = key_of(item)
                if key is not None:
                    self._seen.add(key)

    def _walk(self, root: dict[str, Any] | list[Any], seq: int) -> None:
        # the hot loop of indexing: exact type tests (the data is decoded JSON) rather
        # than helper calls per value
        seen = self._seen
        numbers = self.numbers
        stack: list[Any] = [root]
        while stack:
            node = stack.pop()
            if type(node) is not dict:
                for item in node:
                    kind = type(item)
                    if kind is dict or kind is list or kind is tuple:
                        stack.append(item)
                    elif kind is str:
                        seen.add(item)
                    elif kind is int:
                        seen.add(str(item))
                continue
            first = True
            for field, value in node.items():
                kind = type(value)
                if kind is dict:
                    if ID_TOKEN.fullmatch(field):
                        seen.add(field)
                        self._offer(field, "1", 1, seq, field, value)
                    stack.append(value)
                elif kind is list or kind is tuple:
                    stack.append(value)
                elif kind is str or kind is int:
                    key = value if kind is str else str(value)
                    seen.add(key)
                    if kind is int:
                        numbers.pop(field, None)
                        numbers[field] = float(value)
                    if ID_TOKEN.fullmatch(value) if kind is str else abs(value) >= 100:
                        if first:
                            self._offer(key, "2", 2, seq, field, node)
                        else:
                            rank = 3 if _id_named(field) else 4
                            self._offer(key, field, rank, seq, field, node)
                elif kind is float:
                    numbers.pop(field, None)
                    numbers[field] = value
                first = False

    def _offer(
        self, key: str, slot: str, rank: int, seq: int, field: str, obj: dict[str, Any]
    ) -> None:
        slots = self._bind.get(key)
        if slots is None:
            slots = self._bind[key] = {}
        slots[slot] = (rank, seq, field, obj)  # later outputs replace earlier ones
        if rank <= 2:
            self._identified.append(obj)

    # ---- queries --------------------------------------------------------------------
    def seen(self, key: str, task_input: str | None = None) -> bool:
        """Whether the value occurs in an earlier output or argument, or in a text."""
        if key in self._seen:
            return True
        if task_input and key in task_input:
            return True
        if self.task_input and key in self.task_input:
            return True
        return any(key in text for text in self._texts)

    def binding(self, key: str, argument: str) -> dict[str, Any] | None:
        """The object an argument value acts on, or ``None`` when no earlier output
        holds the value (see the module docstring for the ranking)."""
        slots = self._bind.get(key)
        if not slots:
            return None
        wanted = (argument, singular(argument))
        best: tuple[int, int] | None = None
        found: dict[str, Any] | None = None
        for rank, seq, field, obj in slots.values():
            if rank > 2 and field in wanted:
                rank = 2
            score = (rank, -seq)
            if best is None or score < best:
                best, found = score, obj
        return found

    def entry(self, item: Mapping[str, Any]) -> dict[str, Any] | None:
        """The entry of an earlier output that an object argument names: the latest
        object holding the most of the item's scalar fields with equal values, at least
        two of them (or the one, when the item has a single id-like field and the object
        is that value's identity)."""
        fields = {k: key_of(v) for k, v in item.items() if is_scalar(v) and key_of(v)}
        if not fields:
            return None
        best: tuple[int, int] | None = None
        found: dict[str, Any] | None = None
        for key in fields.values():
            if key is None or not is_id_like(key):
                continue
            for rank, seq, _field, obj in self._bind.get(key, {}).values():
                matched = sum(1 for f, k in fields.items() if f in obj and key_of(obj[f]) == k)
                if matched < 2 and not (len(fields) == 1 and rank <= 2):
                    continue
                score = (matched, seq)
                if best is None or score > best:
                    best, found = score, obj
        return found

    def has_field(self, field: str, value: Scalar) -> bool:
        """Whether an object of the session (one some value is the identity of) holds
        ``field == value``."""
        return (field, key_of(value) or repr(value)) in self._indexed_fields()

    def field_values(self, field: str) -> set[str]:
        return {v for (f, v) in self._indexed_fields() if f == field}

    def _indexed_fields(self) -> set[tuple[str, str]]:
        for obj in self._identified[self._fields_done :]:
            for name, value in obj.items():
                if is_scalar(value):
                    self._fields.add((name, key_of(value) or repr(value)))
        self._fields_done = len(self._identified)
        return self._fields

    def view(self, obj: dict[str, Any]) -> ObjectView:
        found = self._views.get(id(obj))
        if found is None:
            found = _describe(obj)
            self._views[id(obj)] = found
        return found


def _describe(obj: Mapping[str, Any]) -> ObjectView:
    scalars: dict[str, Scalar] = {}
    sizes: dict[str, int] = {}
    members: dict[str, set[str]] = {}
    maps: dict[str, dict[str, Scalar]] = {}

    def member(path: str, value: Any) -> None:
        if is_id_like(value):
            key = key_of(value)
            if key is not None:
                members.setdefault(path, set()).add(key)

    for field, value in obj.items():
        if is_scalar(value):
            scalars[field] = value
        elif isinstance(value, list):
            sizes[field] = len(value)
            for item in value:
                if isinstance(item, dict):
                    for sub, leaf in item.items():
                        if is_scalar(leaf):
                            member(f"{field}[].{sub}", leaf)
                else:
                    member(f"{field}[]", item)
        elif isinstance(value, dict):
            inner = list(value.values())
            if inner and len(inner) <= MAX_MAP_KEYS and all(is_scalar(v) for v in inner):
                maps[field] = {str(k): v for k, v in value.items()}
            if inner and all(isinstance(v, dict) for v in inner):
                sizes[field] = len(value)
                for k, item in value.items():
                    member(f"{field}{{}}", k)
                    for sub, leaf in item.items():
                        if is_scalar(leaf):
                            member(f"{field}{{}}.{sub}", leaf)
    return ObjectView(scalars, sizes, {k: frozenset(v) for k, v in members.items()}, maps)
