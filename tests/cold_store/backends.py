"""The cold store backends the contract suite runs over, and what a test needs to reach
past a store: its data files, to read or damage them as a crash or a bad disk would."""

from __future__ import annotations

import io
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq

from cold_store import ColdStore, S3Options

ACCESS = {"aws_access_key_id": "test-key", "aws_secret_access_key": "test-secret"}
REGION = "us-east-1"


class S3Server:
    """``tests.cold_store.s3server`` in a child process."""

    def __init__(self) -> None:
        self._client: Any = None
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cold_store.s3server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith("port "):
            self.close()
            raise RuntimeError(f"the S3 server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def _command(self, command: str) -> None:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        assert self._proc.stdout.readline().strip() == f"ok {command}"

    def stop(self) -> None:
        """Connections are refused until :meth:`start`; the objects are kept."""
        self._command("stop")

    def start(self) -> None:
        self._command("start")

    def options(self, **overrides: Any) -> S3Options:
        values: dict[str, Any] = {
            "endpoint_url": self.endpoint,
            "region": REGION,
            "access_key_id": ACCESS["aws_access_key_id"],
            "secret_access_key": ACCESS["aws_secret_access_key"],
        }
        values.update(overrides)
        return S3Options(**values)

    def client(self) -> Any:
        """One boto3 client for the server's life (closed with it: each client keeps a
        pool of sockets)."""
        if self._client is None:
            self._client = boto3.client(
                "s3", endpoint_url=self.endpoint, region_name=REGION, **ACCESS
            )
        return self._client

    def new_bucket(self) -> str:
        name = f"cold-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


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
        """The table's data files (committed or not), as names relative to the store."""
        if self.kind == "s3":
            prefix = f"{self._prefix()}/{table}/"
            listing = self._client().list_objects_v2(Bucket=self.bucket, Prefix=prefix)
            keys = [o["Key"] for o in listing.get("Contents", [])]
            return sorted(
                k[len(self._prefix()) + 1 :]
                for k in keys
                if k.endswith(".parquet") and "/_delta_log/" not in k
            )
        root = self._root()
        return sorted(
            p.relative_to(root).as_posix()
            for p in (root / table).rglob("*.parquet")
            if "_delta_log" not in p.parts and not p.name.startswith(".")
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
    from deltalake import DeltaTable

    options = backend.s3.storage_options() if backend.s3 is not None else None
    uri = backend.location.removeprefix("delta+file://") + f"/{table}"
    actions = pa.table(DeltaTable(uri, storage_options=options).get_add_actions(flatten=True))
    return sum(int(n) for n in actions.column("num_records").to_pylist())
