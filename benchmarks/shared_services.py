"""The services several sidecars share in the shared and fleet benchmarks: PostgreSQL, a
Chroma server and moto's S3 server (:class:`Services`), a fresh memory on them
(:class:`Memory`), and sidecar replicas of it, in this process (:func:`library`) or as
``sidecar serve`` processes (:class:`Replica`)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.harness.services import (
    clean_env,
    free_port,
    start_chroma,
    start_serve,
    stop_process,
    wait_ready,
)
from benchmarks.pgserver import PostgresServer

if TYPE_CHECKING:
    from indexes import Embedder
    from sidecar import Sidecar
    from sidecar.shells.client import RemoteSidecar


TOKEN = "bench-shared-token"
"""Every server of the run takes this bearer token (``SIDECAR_TOKEN``)."""


# ---- the shared services ---------------------------------------------------------------
@dataclass(frozen=True)
class Memory:
    """One shared memory: what every replica of it is configured with."""

    database_url: str
    chroma_url: str
    collection: str
    cold_url: str

    def overrides(self) -> dict[str, Any]:
        """Settings for an in-process :class:`~sidecar.Sidecar` on this memory."""
        return {
            "database_url": self.database_url,
            "chroma_url": self.chroma_url,
            "collection": self.collection,
            "cold_url": self.cold_url,
        }

    def env(self) -> dict[str, str]:
        """The same for a ``sidecar serve`` process."""
        return {
            "SIDECAR_DATABASE_URL": self.database_url,
            "SIDECAR_CHROMA_URL": self.chroma_url,
            "SIDECAR_COLLECTION": self.collection,
            "SIDECAR_COLD_URL": self.cold_url,
        }


class Services:
    """PostgreSQL, a Chroma server and an S3 server (moto) for the run, and the S3
    credentials in this process's environment (the Delta backend reads the standard
    variables), restored on exit."""

    def __init__(self, root: Path, s3_proxy: bool = False) -> None:
        """``s3_proxy``: S3 is reached through the server's counting proxy (no faults;
        ``self.s3.direct_endpoint`` reaches the store itself)."""
        self.root = root
        self.s3_proxy = s3_proxy
        self._stack = contextlib.ExitStack()
        self._saved_env: dict[str, str | None] = {}

    def __enter__(self) -> Services:
        try:
            self.postgres = PostgresServer().start()
            self._stack.callback(self.postgres.remove)
            self.chroma_url = self._start_chroma()
            from benchmarks.s3server import FaultSpec, S3Server

            self.s3 = S3Server(FaultSpec() if self.s3_proxy else None)
            self._stack.callback(self.s3.close)
            self.bucket = self.s3.new_bucket()
            opts = self.s3.options()
            self.aws_env = {
                "AWS_ENDPOINT_URL": opts.endpoint_url or "",
                "AWS_ACCESS_KEY_ID": opts.access_key_id or "",
                "AWS_SECRET_ACCESS_KEY": opts.secret_access_key or "",
                "AWS_REGION": opts.region or "",
            }
            for key, value in self.aws_env.items():
                self._saved_env[key] = os.environ.get(key)
                os.environ[key] = value
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._stack.close()

    def _start_chroma(self) -> str:
        proc, url = start_chroma(self.root / "chroma-server", free_port())
        self._stack.callback(stop_process, proc)
        self.chroma_pid = proc.pid
        return url

    def memory(self, cold_folder: bool = False) -> Memory:
        """A fresh memory: a new schema, collection and S3 prefix (or, with
        ``cold_folder``, Delta tables in a local folder every replica here can reach:
        what separates the object store's cost from the database's)."""
        import psycopg

        name = f"m_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.postgres.url(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return Memory(
            database_url=self.postgres.url(name),
            chroma_url=self.chroma_url,
            collection=name,
            cold_url=(
                f"delta+file://{self.root / 'cold' / name}"
                if cold_folder
                else f"s3://{self.bucket}/{name}"
            ),
        )


def library(home: Path, embedder: Embedder, memory: Memory | None, **extra: Any) -> Sidecar:
    """An in-process sidecar: embedded on ``home`` when ``memory`` is ``None``, else a
    replica of ``memory`` (whatever ``SIDECAR_*`` variables this process has)."""
    from sidecar import Sidecar
    from sidecar.settings import Settings

    shared = memory.overrides() if memory is not None else {}
    return Sidecar(Settings.load(env={}, home=home, **shared, **extra), embedder)


class Replica:
    """One ``sidecar serve`` process (its own home) and a client of it.  ``launcher``:
    what runs the CLI instead of the ``sidecar`` script (a profiler's command line that
    ends where the CLI's arguments begin)."""

    def __init__(
        self,
        home: Path,
        memory: Memory | None,
        extra_env: dict[str, str],
        launcher: Sequence[str] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = clean_env() | {
            "SIDECAR_HOME": str(home),
            "SIDECAR_EMBEDDER": "hashing",
            "SIDECAR_TOKEN": TOKEN,
            "SIDECAR_REPORT_RATE": "0",
            **(memory.env() if memory is not None else {}),
            **extra_env,
        }
        home.mkdir(parents=True, exist_ok=True)
        self.log = home.parent / f"{home.name}.log"
        with self.log.open("wb") as log:
            self.proc = start_serve(env, log, self.port, launcher)

    def wait_ready(self, timeout: float = 120.0) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        wait_ready(self.url, headers, self.proc, timeout, self.log)

    def client(self) -> RemoteSidecar:
        from sidecar.shells.client import RemoteSidecar

        return RemoteSidecar(self.url, TOKEN, timeout=120)

    def stop(self) -> None:
        stop_process(self.proc)


@contextlib.contextmanager
def replicas(
    root: Path,
    count: int,
    memory: Memory | None,
    extra_env: dict[str, str] | None = None,
    launcher: Sequence[str] | None = None,
) -> Iterator[list[Replica]]:
    """``count`` servers started together, each on a home of its own under ``root``."""
    started = [
        Replica(root / f"replica-{uuid.uuid4().hex[:6]}", memory, extra_env or {}, launcher)
        for _ in range(count)
    ]
    try:
        for r in started:
            r.wait_ready()
        yield started
    finally:
        for r in started:
            r.stop()
