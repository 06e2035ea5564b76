"""The library's typed results as JSON and back.

:func:`dump` turns a frozen dataclass into plain JSON values (a class may shape its own
form with ``to_dict``); :func:`load` rebuilds it from the field types (a class may read
its own form with ``from_dict``).  The HTTP API sends ``dump``'s form and the client
reads it with ``load``, so both ends of the wire speak the library's types.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

T = TypeVar("T")


def dump(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): dump(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [dump(v) for v in value]
    return value


def dump_dict(value: Any) -> dict[str, Any]:
    """:func:`dump` of a value whose JSON form is an object."""
    out = dump(value)
    if not isinstance(out, dict):
        raise TypeError(f"{type(value).__name__} does not dump to an object")
    return out


def load(cls: type[T], data: Any) -> T:
    """``data`` (decoded JSON) as an instance of ``cls``."""
    return typing.cast(T, _load(cls, data))


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _load(tp: Any, data: Any) -> Any:
    if tp is Any or data is None:
        return data
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        return _load(options[0], data) if len(options) == 1 else data
    if origin is typing.Literal:
        return data
    if isinstance(tp, type) and hasattr(tp, "from_dict"):
        return tp.from_dict(data)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        kwargs = {
            f.name: _load(hints[f.name], data[f.name])
            for f in dataclasses.fields(tp)
            if f.init and f.name in data
        }
        return tp(**kwargs)
    if origin is tuple:
        args = get_args(tp)
        item = args[0] if args else Any
        return tuple(_load(item, v) for v in data)
    if origin in (list, Sequence):
        (item,) = get_args(tp) or (Any,)
        return [_load(item, v) for v in data]
    if origin in (dict, Mapping):
        _key, item = get_args(tp) or (Any, Any)
        return {k: _load(item, v) for k, v in data.items()}
    return data
