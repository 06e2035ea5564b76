"""The cold store: the abandoned-chain archive as Parquet under one folder."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cold_store import schemas
from cold_store.errors import PointerError
from cold_store.table import ParquetTable, QuarantinedFile

SCHEME = "cold://"


def make_pointer(table: str, key: str) -> str:
    return f"{SCHEME}{table}/{key}"


def parse_pointer(pointer: str) -> tuple[str, str]:
    """``cold://<table>/<key>`` -> ``(table, key)``."""
    if not pointer.startswith(SCHEME):
        raise PointerError(pointer, f"must start with {SCHEME}")
    table, sep, key = pointer[len(SCHEME) :].partition("/")
    if not sep or not table or not key or "/" in key:
        raise PointerError(pointer, "expected cold://<table>/<id>")
    return table, key


class ColdStore:
    """Opens the cold tables under ``root``; resolves pointers to full records.

    ``chains``: abandoned chains (``cold://chains/<chain_id>``); ``tools``: evicted
    tools (``cold://tools/<record_id>``).
    """

    def __init__(
        self,
        root: str | Path,
        writable: bool = True,
        no_writer: Callable[[], bool] | None = None,
    ) -> None:
        """``writable=False`` opens every table read-only: nothing under ``root`` is
        created, indexed or moved; ``no_writer`` says whether no process writes the
        store now (see :class:`ParquetTable`)."""
        self.root = Path(root)
        self.writable = writable
        self.chains = ParquetTable(
            self.root,
            "chains",
            schemas.CHAINS,
            key="chain_id",
            partition_by="archive_date",
            writable=writable,
            no_writer=no_writer,
        )
        self.tools = ParquetTable(
            self.root,
            "tools",
            schemas.TOOLS,
            key="record_id",
            partition_by="archive_date",
            writable=writable,
            no_writer=no_writer,
        )
        self._tables = {"chains": self.chains, "tools": self.tools}

    def table(self, name: str) -> ParquetTable:
        return self._tables[name]

    def resolve(self, pointer: str) -> dict[str, Any]:
        table, key = parse_pointer(pointer)
        if table not in self._tables:
            raise PointerError(pointer, f"unknown table {table!r}")
        return self._tables[table].get(key)

    def verify(self, deep: bool = False) -> list[QuarantinedFile]:
        """Files of every table that are not what was published (see
        :meth:`ParquetTable.verify`)."""
        return [q for t in self._tables.values() for q in t.verify(deep)]

    def check_footers(self) -> list[str]:
        """Check every data file's footer (see :meth:`ParquetTable.check_footers`); returns the
        files found unreadable, as ``<table>/<file>``."""
        return [f"{name}/{rel}" for name, t in self._tables.items() for rel in t.check_footers()]

    def quarantined(self) -> list[QuarantinedFile]:
        return [q for t in self._tables.values() for q in t.quarantined()]

    def close(self) -> None:
        for table in self._tables.values():
            table.close()
