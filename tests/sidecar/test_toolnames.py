"""Tool names from outside become tool ids that no look-alike shares: the gateway and the
OTLP intake map them with one function, and every confusable of a real id that Unicode
TR39 lists (its ``confusables.txt``, as the ``confusable-homoglyphs`` package ships it),
every format character slipped in and every separator put in place of ``_`` maps to an
id of its own."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

from sidecar.agents.gateway.proxy.catalog import valid_name
from sidecar.agents.otlp.tools import tool_id
from sidecar.trust.toolnames import VALID_NAME, tool_id_for

REAL = ("refund", "get_order", "exchange_items", "transfer_funds", "delete_user")
FORMAT_CHARACTERS = (
    "\u200b",  # zero width space
    "\u200c",  # zero width non-joiner
    "\u200d",  # zero width joiner
    "\u2060",  # word joiner
    "\ufeff",  # zero width no-break space
    "\u00ad",  # soft hyphen
    "\u202e",  # right-to-left override
    "\u180e",  # mongolian vowel separator
)
SEPARATORS = ("/", ":", " ", "\\", "|", "@", "\u00a0", "\u3000", "\uff3f", "\u2010", "\u2024")


@cache
def confusables() -> dict[str, list[str]]:
    """For each character, the characters TR39 says look like it."""
    import confusable_homoglyphs

    data = Path(confusable_homoglyphs.__file__).with_name("confusables.json")
    table: dict[str, list[dict[str, str]]] = json.loads(data.read_text(encoding="utf-8"))
    out: dict[str, list[str]] = {}
    for char, entries in table.items():
        out[char] = [e["c"] for e in entries if e["c"] != char]
    return out


def look_alikes(real: str) -> set[str]:
    """Every one-character confusable substitution of ``real``, every format character
    at every position, fullwidth ``real``, and every separator in place of ``_`` (or
    between two halves)."""
    out: set[str] = set()
    table = confusables()
    for i, char in enumerate(real):
        for other in table.get(char, []):
            out.add(real[:i] + other + real[i + 1 :])
    for i in range(len(real) + 1):
        for fmt in FORMAT_CHARACTERS:
            out.add(real[:i] + fmt + real[i:])
    out.add("".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in real))
    for sep in SEPARATORS:
        out.add(real.replace("_", sep) if "_" in real else real[:3] + sep + real[3:])
    out.discard(real)
    return out


def test_the_gateway_and_the_trace_intake_map_names_alike() -> None:
    for name in ("files/read", "read file", "ｒｅｆｕｎｄ", "get:order", "x" * 200, "ok_name"):  # noqa: RUF001
        mapped, _ = tool_id(name)
        assert mapped == valid_name(name) == tool_id_for(name)


@pytest.mark.parametrize("real", REAL)
def test_no_look_alike_lands_on_the_real_id(real: str) -> None:
    """Before, the trace intake folded a name to NFKC and replaced what the grammar
    lacks by ``_`` (stripped at the ends): ``refund`` + U+200B, fullwidth ``refund``,
    ``get/order`` and ``get:order`` all became the real id."""
    names = look_alikes(real)
    assert len(names) > 100  # TR39 lists dozens of look-alikes for most letters
    landed = {}
    for name in names:
        mapped, change = tool_id(name)
        if mapped is None:
            continue  # nothing usable: dropped, and counted
        assert VALID_NAME.fullmatch(mapped), (name, mapped)
        if mapped in REAL:
            landed[name] = mapped
        assert (change is None) == (mapped == name)  # a mapped name is counted
    assert not landed, {n.encode("unicode_escape").decode(): m for n, m in landed.items()}


def test_look_alikes_do_not_meet_each_other() -> None:
    """Two different names outside the grammar never share an id (the digest is of the
    whole name), so evidence about one look-alike is never another's."""
    names = {n for real in REAL for n in look_alikes(real)}
    mapped = {}
    for name in names:
        tool = tool_id_for(name)
        assert mapped.setdefault(tool, name) == name, (name, mapped[tool])


def test_a_name_without_a_letter_or_digit_is_dropped() -> None:
    assert tool_id("///") == (None, "no letter or digit")
    assert tool_id("\u200b\u200b") == (None, "no letter or digit")
    assert tool_id("get_order") == ("get_order", None)
