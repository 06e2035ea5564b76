"""A sidecar home: the folder holding one sidecar's stores, and who may write to it.

    $SIDECAR_HOME/
      chroma/         the hot index (embedded Chroma), unless a Chroma server holds it
      cold/           the Parquet archive (see :mod:`cold_store`)
      state.sqlite    everything else (see :mod:`sidecar.state`), unless a PostgreSQL
                      database holds it (``SIDECAR_DATABASE_URL``)
      owner.lock      held by the one process that writes (see below)
      evict.lock      held while tools move between the hot and the cold store
      server.json     the URL of the server that owns the home, while it runs
      token           the HTTP API's bearer token (0600)

**Ownership.**  A home opened for writing is *owned*: its process holds ``owner.lock``
(exclusively for the embedded Chroma, which tolerates one writer process; shared when
the hot index is on a Chroma server, so that several processes may write there) for as
long as it is open.  Only the owner writes, reconciles or finishes interrupted moves.
A home opened for reading takes no lock and never writes anything: not a folder, not a
table, not a WAL file; a read of a home that does not exist fails instead of creating
an empty one.

**The state's backend** is chosen here and nowhere else (:func:`open_state`): the
embedded SQLite file, or PostgreSQL when ``SIDECAR_DATABASE_URL`` is set.  Opened for
writing, the database gets every module's tables and the migrations it lacks
(:mod:`sidecar.storage.schema`); a database written by a newer sidecar is refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

from cold_store import ColdStore, ColdStoreError
from sidecar import callmemory, journal, registry, revocation, state
from sidecar.errors import Busy, InvalidInput, NotFound, StateUnavailable
from sidecar.lock import WriterLock, holder
from sidecar.settings import Settings
from sidecar.state import StateStore
from sidecar.storage import Database, DatabaseError, Lock, Migration, SchemaTooNew
from sidecar.storage.schema import check, prepare

OWNER_LOCK = "owner.lock"
SERVER_FILE = "server.json"
TOKEN_FILE = "token"

SCHEMAS = (state.SCHEMA, registry.SCHEMA, journal.SCHEMA, revocation.SCHEMA, callmemory.SCHEMA)
"""Every module's tables, created when a home is opened for writing."""
MIGRATIONS = (Migration(1, "sightings count sessions, not reports", state.sessions_from_counts),)
"""The schema's versions (see :mod:`sidecar.storage.schema`), oldest first."""


def open_state(
    settings: Settings, writable: bool, no_writer: Callable[[], bool] | None = None
) -> Database:
    """The state database ``settings`` name: PostgreSQL at ``database_url``, else the
    SQLite file under the home.  Opened for writing, it is given every module's tables
    and the migrations it lacks; either way a newer schema is refused."""
    db: Database
    if settings.database_url is not None:
        from sidecar.storage.postgres import PostgresDatabase

        db = PostgresDatabase(settings.database_url, writable)
    else:
        from sidecar.storage.sqlite import SqliteDatabase

        db = SqliteDatabase(settings.state_path, writable, no_writer)
    try:
        if writable:
            prepare(db, SCHEMAS, MIGRATIONS)
        elif not db.has_table("meta"):
            raise NotFound(
                f"no sidecar state in {db.location}: nothing was added or reported there "
                "(check SIDECAR_DATABASE_URL; writes and `sidecar serve` create it)"
            )
        else:
            check(db, MIGRATIONS)
    except BaseException:
        db.close()
        raise
    return db


class Home:
    def __init__(self, settings: Settings, writable: bool = True) -> None:
        self.settings = settings
        self.path = settings.home
        self.writable = writable
        self._owner: WriterLock | None = None
        if writable:
            self._claim()
        elif settings.database_url is None and not settings.state_path.exists():
            raise NotFound(
                f"no sidecar home at {self.path}: nothing was added or reported there "
                "(check --home or SIDECAR_HOME; writes and `sidecar serve` create a home)"
            )

        def no_writer() -> bool:
            return holder(self.path / OWNER_LOCK, "writer") is None

        try:
            self.state = StateStore(open_state(settings, writable, no_writer))
        except (NotFound, SchemaTooNew):
            self.release()
            raise
        except DatabaseError as exc:
            self.release()
            where = settings.state_path if settings.database_url is None else "(PostgreSQL)"
            raise StateUnavailable(
                f"cannot open the state database {where}: {exc.detail}{disk_note(self.path)}"
            ) from exc
        try:
            self.cold = ColdStore(settings.cold_path, writable=writable, no_writer=no_writer)
        except (ColdStoreError, OSError, sqlite3.Error) as exc:
            self.state.close()
            self.release()
            raise StateUnavailable(
                f"cannot open the cold store {settings.cold_path}: {exc}{disk_note(self.path)}"
            ) from exc

    def _claim(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateUnavailable(
                f"cannot create the sidecar home {self.path}: {exc.strerror}"
            ) from exc
        shared = self.settings.chroma_url is not None
        lock = WriterLock(self.path / OWNER_LOCK, "writer of this home", shared=shared)
        try:
            lock.acquire()
        except Busy as exc:
            url = server_url(self.path)
            if url:
                raise Busy(
                    f"a sidecar server owns {self.path} ({url}); send this through it "
                    f"with --url {url}",
                    exc.holder,
                ) from None
            raise
        except OSError as exc:
            raise StateUnavailable(
                f"cannot lock the sidecar home {self.path}: {exc}{disk_note(self.path)}"
            ) from exc
        self._owner = lock

    @property
    def owned(self) -> bool:
        return self._owner is not None and self._owner.held

    def evict_lock(self) -> Lock:
        """The lock that one eviction, restore or recovery at a time holds: a file lock
        under the home (``evict.lock``) for SQLite, an advisory lock in PostgreSQL."""
        return self.state.db.advisory_lock("evict", "eviction")

    @contextlib.contextmanager
    def hot_write(self) -> Iterator[None]:
        """Around every write to the hot index: the revision moves before and after, so
        that a process killed mid-write still makes every other reader re-read."""
        self.state.bump_tools_revision()
        try:
            yield
        finally:
            self.state.bump_tools_revision()

    def announce_server(self, url: str) -> None:
        """Record the URL of the server that owns this home, for CLI commands to find."""
        tmp = self.path / f".{SERVER_FILE}.{os.getpid()}"
        tmp.write_text(json.dumps({"url": url, "pid": os.getpid()}))
        os.replace(tmp, self.path / SERVER_FILE)

    def withdraw_server(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            (self.path / SERVER_FILE).unlink()

    def release(self) -> None:
        if self._owner is not None:
            self._owner.release()
            self._owner = None

    def close(self) -> None:
        self.state.close()
        self.cold.close()
        self.release()


def migrate_state(settings: Settings, url: str) -> dict[str, int]:
    """Copy the home's local (SQLite) state into the empty PostgreSQL database at
    ``url``, as this home's owner (so nothing writes meanwhile); returns the rows per
    table, equal in both.  The cold archive and the hot index stay where they are."""
    from sidecar.storage.copy import copy_state, tables_of

    target_settings = settings.with_(database_url=url)  # refuses a URL that is not one
    if settings.database_url is not None:
        raise InvalidInput("this home's state is already in PostgreSQL (SIDECAR_DATABASE_URL)")
    if not settings.state_path.exists():
        raise NotFound(f"no sidecar home at {settings.home}: nothing to migrate")
    home = Home(settings, writable=True)
    try:
        target = open_state(target_settings, writable=True)
        try:
            return copy_state(home.state.db, target, tables_of(SCHEMAS))
        finally:
            target.close()
    finally:
        home.close()


def disk_note(path: Path) -> str:
    """Why the file system under ``path`` refuses writes, when it is plainly full or
    read-only (SQLite reports either as a bare I/O error)."""
    try:
        fs = os.statvfs(path)
    except OSError:
        return ""
    if fs.f_flag & os.ST_RDONLY:
        return " (the file system is read-only)"
    if fs.f_bavail == 0:
        return " (no space left on the device)"
    return ""


def server_url(path: Path) -> str | None:
    """The URL of the running server that owns the home at ``path``, if any (a file
    left by a server that died is ignored: its lock went with it)."""
    try:
        info = json.loads((path / SERVER_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not isinstance(info.get("url"), str):
        return None
    return info["url"] if holder(path / OWNER_LOCK, "writer") else None
