"""The cold store backends the contract suite runs over, and what a test needs to reach
past a store: its data files, to read or damage them as a crash or a bad disk would."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from benchmarks.delta_stress import committed_rows as stress_committed_rows
from benchmarks.s3server import ACCESS, REGION, S3Server
from cold_store import ColdStore, S3Options

__all__ = ["ACCESS", "REGION", "Backend", "S3Server", "committed_rows", "garbage", "torn"]


@dataclass
class Backend:
    """One place to open stores at, again and again; every store opened is closed by
    the fixture that made the backend."""

    kind: str
    """``parquet``, ``delta`` or ``s3``."""
    location: str
    s3: S3Options | None = None
    server: S3Server | None = None
    bucket: str = ""
    opened: list[ColdStore] = field(default_factory=list)

    def open(self, writable: bool = True) -> ColdStore:
        store = ColdStore(self.location, writable=writable, s3=self.s3)
        self.opened.append(store)
        return store

    @property
    def is_delta(self) -> bool:
        return self.kind in ("delta", "s3")

    # ---- reaching past the store --------------------------------------------------
    def data_files(self, table: str) -> list[str]:
        """The table's data files (committed or not), as names relative to the store
        (not the files under ``_``-folders: the log, the key snapshots)."""
        if self.kind == "s3":
            prefix = f"{self._prefix()}/{table}/"
            listing = self._client().list_objects_v2(Bucket=self.bucket, Prefix=prefix)
            keys = [o["Key"] for o in listing.get("Contents", [])]
            return sorted(
                k[len(self._prefix()) + 1 :]
                for k in keys
                if k.endswith(".parquet") and "/_" not in "/" + k[len(prefix) :]
            )
        root = self._root()
        return sorted(
            p.relative_to(root).as_posix()
            for p in (root / table).rglob("*.parquet")
            if not any(part.startswith("_") for part in p.relative_to(root / table).parts)
            and not p.name.startswith(".")
        )

    def data_files_under(self, folder: str) -> list[str]:
        """Every file under ``folder`` (relative to the store), by name."""
        if self.kind == "s3":
            prefix = f"{self._prefix()}/{folder}/"
            listing = self._client().list_objects_v2(Bucket=self.bucket, Prefix=prefix)
            return sorted(o["Key"][len(prefix) :] for o in listing.get("Contents", []))
        return sorted(p.name for p in (self._root() / folder).iterdir())

    def read_bytes(self, name: str) -> bytes:
        if self.kind == "s3":
            body = self._client().get_object(Bucket=self.bucket, Key=f"{self._prefix()}/{name}")
            data: bytes = body["Body"].read()
            return data
        return (self._root() / name).read_bytes()

    def write_bytes(self, name: str, data: bytes) -> None:
        if self.kind == "s3":
            self._client().put_object(Bucket=self.bucket, Key=f"{self._prefix()}/{name}", Body=data)
        else:
            (self._root() / name).write_bytes(data)

    def delete(self, name: str) -> None:
        if self.kind == "s3":
            self._client().delete_object(Bucket=self.bucket, Key=f"{self._prefix()}/{name}")
        else:
            (self._root() / name).unlink()

    def keys_in(self, name: str, column: str = "chain_id") -> list[str]:
        table = pq.read_table(io.BytesIO(self.read_bytes(name)), columns=[column])
        return [str(k) for k in table.column(column).to_pylist()]

    def file_holding(self, table: str, key: str, column: str = "chain_id") -> str:
        (name,) = [n for n in self.data_files(table) if key in self.keys_in(n, column)]
        return name

    def damage(self, name: str, how: Callable[[bytes], bytes]) -> None:
        self.write_bytes(name, how(self.read_bytes(name)))

    def _client(self) -> Any:
        assert self.server is not None
        return self.server.client()

    def _root(self) -> Path:
        return Path(self.location.removeprefix("delta+file://"))

    def _prefix(self) -> str:
        return self.location.removeprefix(f"s3://{self.bucket}/")


def garbage(data: bytes) -> bytes:
    """Other bytes of the same length."""
    return (b"\xde\xad\xbe\xef" * (len(data) // 4 + 1))[: len(data)]


def torn(data: bytes) -> bytes:
    return data[: len(data) // 2]


def committed_rows(backend: Backend, table: str) -> int:
    """Rows in the files the Delta table's current version names, copies included."""
    return stress_committed_rows(backend.location, backend.s3, table)


class FakeStore:
    """An HTTP server answering every PUT with ``put_status`` (ignoring If-None-Match
    when that is 200) and every other request with 204; records what it was asked."""

    def __init__(self, put_status: int) -> None:
        self.requests: list[tuple[str, str, str | None]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                self.rfile.read(length)
                fake.requests.append(("PUT", self.path, self.headers.get("if-none-match")))
                self.send_response(put_status)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_DELETE(self) -> None:
                fake.requests.append(("DELETE", self.path, None))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
