"""A sidecar home: the folder holding one sidecar's stores, and who may write to it.

    $SIDECAR_HOME/
      chroma/         the hot index (embedded Chroma), unless a Chroma server holds it
      cold/           the Parquet archive (see :mod:`cold_store`), unless
                      ``SIDECAR_COLD_URL`` names a Delta table on S3 or a folder
      state.sqlite    everything else (see :mod:`sidecar.storage.state`), unless a PostgreSQL
                      database holds it (``SIDECAR_DATABASE_URL``)
      owner.lock      held by the one process that writes (see below)
      evict.lock      held while tools move between the hot and the cold store
      migrate.lock    held while ``sidecar migrate`` upgrades the schema (SQLite only)
      server.json     the URL of the server that owns the home, while it runs
      token           the HTTP API's bearer token (0600)

**Ownership.**  A home opened for writing is *owned*: its process holds ``owner.lock``
(exclusively for the embedded Chroma, which tolerates one writer process; shared when
the hot index is on a Chroma server, so that several processes may write there) for as
long as it is open.  Only the owner writes, reconciles or finishes interrupted moves.
A home opened for reading takes no lock and never writes anything: not a folder, not a
table, not a WAL file; a read of a home that does not exist fails instead of creating
an empty one.  Opened for writing, a home is made where there is none: a caller that must
not make one (the CLI's commands but :data:`~sidecar.errors.HOME_CREATORS`) asks
:func:`require_home` first.

**The backends** are chosen here and nowhere else: the state (:func:`open_state`) in the
embedded SQLite file, or PostgreSQL when ``SIDECAR_DATABASE_URL`` is set; the cold
archive (:func:`open_cold`) in the home's folder, or at ``SIDECAR_COLD_URL``.  Opened for
writing, the database gets every module's tables and the migrations it lacks
(:mod:`sidecar.storage.schema`); a database written by a newer sidecar is refused.

**Migrations as one step.**  Replicas of a shared state are told not to migrate
(``SIDECAR_MIGRATE=never``): :func:`migrate_schema` (``sidecar migrate``) is then the one
writer of the schema, one run at a time, and a replica asks :func:`schema_pending`
until there is nothing left to wait for.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from cold_store import ColdStore, ColdStoreError
from cold_store.base import ColdTable
from cold_store.errors import UnsafeStore
from cold_store.probe import S3Options
from sidecar.app.lock import WriterLock, holder
from sidecar.errors import (
    HOME_CREATORS,
    Busy,
    ColdStoreUnavailable,
    HomeNotFound,
    InvalidInput,
    NotFound,
    SchemaPending,
    StateUnavailable,
    UnsafeStorage,
)
from sidecar.results import SchemaMigration
from sidecar.settings import Settings
from sidecar.storage import Database, DatabaseError, Lock, SchemaTooNew
from sidecar.storage.schema import (
    SCHEMA,
    check,
    created_tables,
    latest,
    pending,
    prepare,
    upgrade,
)
from sidecar.storage.state import MIGRATIONS, SCHEMAS, State

OWNER_LOCK = "owner.lock"
SERVER_FILE = "server.json"
TOKEN_FILE = "token"


def open_state(
    settings: Settings, writable: bool, no_writer: Callable[[], bool] | None = None
) -> Database:
    """The state database ``settings`` name: PostgreSQL at ``database_url``, else the
    SQLite file under the home.  Opened for writing, it is given every module's tables
    and the migrations it lacks, unless ``settings.migrate`` is ``never``: then it must
    be at this code's schema already (:class:`~sidecar.errors.SchemaPending` names
    what it lacks).  Either way a newer schema is refused."""
    may_migrate = settings.migrate == "auto"
    db = _database(settings, writable, no_writer, migrate=may_migrate)
    try:
        if writable and may_migrate:
            prepare(db, SCHEMAS, MIGRATIONS)
        elif writable:
            missing = pending(db, SCHEMAS, MIGRATIONS, db.own_tables)
            if missing:
                raise SchemaPending(_pending_message(db.location, missing))
        elif not db.has_table("meta"):
            raise NotFound(
                f"no sidecar state in {db.location}: nothing was added or reported there "
                f"(check SIDECAR_DATABASE_URL; {HOME_CREATORS} create it)"
            )
        else:
            check(db, MIGRATIONS)
    except BaseException:
        db.close()
        raise
    return db


def _database(
    settings: Settings, writable: bool, no_writer: Callable[[], bool] | None, migrate: bool
) -> Database:
    """The backend ``settings`` name, connected; nothing of the schema done yet.
    ``migrate=False``: a writable open runs no DDL of the backend's own either."""
    if settings.database_url is not None:
        from sidecar.storage.backends.postgres import PostgresDatabase

        return PostgresDatabase(
            settings.database_url,
            writable,
            revision_cache_s=settings.revision_cache_ms / 1000,
            revision_lease_s=settings.revision_lease_ms / 1000,
            migrate=migrate,
        )
    from sidecar.storage.backends.sqlite import SqliteDatabase

    return SqliteDatabase(settings.state_path, writable, no_writer)


def _pending_message(location: str, missing: Sequence[str]) -> str:
    return (
        f"the state database {location} is not at this sidecar's schema ({'; '.join(missing)}) "
        "and SIDECAR_MIGRATE=never leaves that to one explicit step: run `sidecar migrate` "
        "with the same settings"
    )


def schema_pending(settings: Settings) -> list[str]:
    """What the state ``settings`` name lacks to be at this code's schema (empty: it is
    there), read with nothing written, not even a table or a file.  Raises
    :class:`~sidecar.errors.SchemaTooNew` for a newer schema, and the backend's
    :class:`~sidecar.storage.DatabaseError` when it cannot be read."""
    if settings.database_url is None and not settings.state_path.exists():
        return [f"no state at {settings.state_path}"]
    db = _database(settings, writable=False, no_writer=None, migrate=False)
    try:
        return pending(db, SCHEMAS, MIGRATIONS, db.own_tables)
    finally:
        db.close()


def migrate_schema(settings: Settings) -> SchemaMigration:
    """The one explicit step that brings the state ``settings`` name to this code's
    schema: every module's missing tables (and the backend's own), then the migrations
    it lacks, whatever ``settings.migrate`` says.  One at a time: a second run while one
    holds the state's ``migrate`` lock (PostgreSQL: an advisory lock; SQLite: a lock
    file beside the database, besides the write lock its transaction takes) is refused
    with :class:`~sidecar.errors.Busy`.  A home that does not exist is not made."""
    require_home(settings)
    db = _database(settings, writable=True, no_writer=None, migrate=False)
    try:
        with db.advisory_lock("migrate", "a schema migration"):
            check(db, MIGRATIONS)
            wanted = (*created_tables((SCHEMA, *SCHEMAS)), *db.own_tables)
            missing = tuple(t for t in wanted if not db.has_table(t))
            db.create_own_tables()
            applied = upgrade(db, SCHEMAS, MIGRATIONS)
            left = pending(db, SCHEMAS, MIGRATIONS, db.own_tables)
            if left:
                raise StateUnavailable(_pending_message(db.location, left))
            return SchemaMigration(
                db.location,
                latest(MIGRATIONS),
                missing,
                tuple(f"{m.version}: {m.description}" for m in applied),
            )
    finally:
        db.close()


def s3_options(env: Mapping[str, str] | None = None) -> S3Options:
    """How to reach the S3 store of an ``s3://`` cold URL, from the standard AWS
    variables (``AWS_ENDPOINT_URL_S3`` before ``AWS_ENDPOINT_URL``; ``AWS_REGION``
    before ``AWS_DEFAULT_REGION``)."""
    env = os.environ if env is None else env

    def get(*names: str) -> str | None:
        return next((env[n] for n in names if env.get(n)), None)

    return S3Options(
        endpoint_url=get("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
        region=get("AWS_REGION", "AWS_DEFAULT_REGION") or "us-east-1",
        access_key_id=get("AWS_ACCESS_KEY_ID"),
        secret_access_key=get("AWS_SECRET_ACCESS_KEY"),
        session_token=get("AWS_SESSION_TOKEN"),
    )


def open_cold(
    settings: Settings, writable: bool, no_writer: Callable[[], bool] | None = None
) -> ColdStore:
    """The cold archive ``settings`` name: ``cold_url`` (a Delta table per logical table,
    on S3 or a folder), else the home's Parquet folder.  A Delta store is probed before
    it is written: one that does not refuse a second put-if-absent is refused here."""
    where = settings.cold_location
    try:
        return ColdStore(
            where,
            writable=writable,
            no_writer=no_writer,
            s3=s3_options(),
            call_deadline_s=settings.cold_call_deadline,
        )
    except UnsafeStore as exc:
        raise UnsafeStorage(f"refusing the cold store {where}: {exc}") from exc
    except (ColdStoreError, OSError, sqlite3.Error) as exc:
        note = disk_note(settings.home) if settings.cold_url is None else ""
        raise ColdStoreUnavailable(f"cannot open the cold store {where}: {exc}{note}") from exc


def require_home(settings: Settings) -> None:
    """Raise :class:`~sidecar.errors.HomeNotFound` when ``settings`` name a home that
    does not exist (its SQLite state is not there), before anything is made.  A state in
    PostgreSQL is the database's, checked as it is opened: the home folder then holds
    only this process's lock and token."""
    if settings.database_url is None and not settings.state_path.exists():
        raise HomeNotFound(settings.home)


class Home:
    def __init__(self, settings: Settings, writable: bool = True) -> None:
        self.settings = settings
        self.path = settings.home
        self.writable = writable
        self._owner: WriterLock | None = None
        if writable:
            self._claim()
        else:
            require_home(settings)

        def no_writer() -> bool:
            return holder(self.path / OWNER_LOCK, "writer") is None

        try:
            self.state = State(open_state(settings, writable, no_writer))
        except (NotFound, SchemaTooNew, SchemaPending, UnsafeStorage):
            self.release()
            raise
        except DatabaseError as exc:
            self.release()
            where = settings.state_path if settings.database_url is None else "(PostgreSQL)"
            raise StateUnavailable(
                f"cannot open the state database {where}: {exc.detail}{disk_note(self.path)}"
            ) from exc
        try:
            self.cold = open_cold(settings, writable, no_writer)
        except BaseException:
            self.state.close()
            self.release()
            raise

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
                    f"a sidecar server owns {self.path} ({url}); go through it: the CLI "
                    f"does so by itself (or with --url {url}), Python with "
                    f"RemoteSidecar({url!r}, token) (the token is {self.path / 'token'})",
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
        return self.state.lock("evict", "eviction")

    @contextlib.contextmanager
    def hot_write(self) -> Iterator[None]:
        """Around every write to the hot index: the revision moves before and after, so
        that a process killed mid-write still makes every other reader re-read."""
        self._bump_tools()
        try:
            yield
        finally:
            self._bump_tools()

    def _bump_tools(self) -> None:
        with self.state.tx() as tx:
            self.state.revisions.bump_tools(tx)

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


MIGRATE_CHUNK = 2_000
"""Cold rows appended to the target per commit while migrating."""


def migrate(
    settings: Settings, to_database: str | None = None, to_cold: str | None = None
) -> dict[str, Any]:
    """Copy this home's local stores into shared ones, as the home's owner (so nothing
    writes meanwhile): the SQLite state into the empty PostgreSQL database
    ``to_database``, the Parquet archive into the empty cold store ``to_cold`` (a Delta
    table per logical table, on S3 or a folder).  Every count is checked equal, and for
    the archive a digest of every row too; a mismatch raises and names it.  The hot
    index stays where it is (a Chroma server is given by ``--chroma-url``)."""
    if to_database is None and to_cold is None:
        raise InvalidInput("nothing to migrate to: give --to-database URL, --to-cold URL or both")
    if to_database is not None:
        settings.with_(database_url=to_database)  # refuses a URL that is not one
        if settings.database_url is not None:
            raise InvalidInput("this home's state is already in PostgreSQL (SIDECAR_DATABASE_URL)")
    if to_cold is not None:
        settings.with_(cold_url=to_cold)
        if settings.cold_url is not None:
            raise InvalidInput(f"this home's archive is already at {settings.cold_url}")
    require_home(settings)
    home = Home(settings, writable=True)
    out: dict[str, Any] = {}
    try:
        if to_database is not None:
            out["tables"] = _copy_state(home, settings.with_(database_url=to_database))
        if to_cold is not None:
            out["cold"] = _copy_cold(home.cold, settings.with_(cold_url=to_cold))
    finally:
        home.close()
    return out


def _copy_state(home: Home, target_settings: Settings) -> dict[str, int]:
    from sidecar.storage.copy import copy_state, tables_of

    target = open_state(target_settings, writable=True)
    try:
        return copy_state(home.state.database, target, tables_of(SCHEMAS))
    finally:
        target.close()


def _copy_cold(source: ColdStore, target_settings: Settings) -> dict[str, dict[str, Any]]:
    """Every row of every cold table into the empty store ``target_settings`` names;
    per table, the rows copied and the digest both sides agree on."""
    target = open_cold(target_settings, writable=True)
    copied: dict[str, dict[str, Any]] = {}
    try:
        for name in ("chains", "tools"):
            src, dst = source.table(name), target.table(name)
            if dst.count():
                raise InvalidInput(
                    f"the cold store {target_settings.cold_url} already holds {name}: "
                    "migrate into an empty one"
                )
            chunk: list[dict[str, Any]] = []
            part = 0
            for row in src.scan():
                chunk.append(row)
                if len(chunk) >= MIGRATE_CHUNK:
                    dst.append(chunk, batch=f"migrate-{name}-{part}")
                    chunk, part = [], part + 1
            if chunk:
                dst.append(chunk, batch=f"migrate-{name}-{part}")
            before, after = table_digest(src), table_digest(dst)
            if before != after:
                raise ColdStoreUnavailable(
                    f"the copy of {name} differs from the archive ({after[0]} rows, digest "
                    f"{after[1][:12]}; the archive holds {before[0]}, {before[1][:12]})"
                )
            copied[name] = {"rows": before[0], "digest": before[1]}
    finally:
        target.close()
    return copied


def table_digest(table: ColdTable) -> tuple[int, str]:
    """``(rows, sha256)`` over every row of a cold table in key order, each row as
    canonical JSON: equal for two tables that hold the same records, whatever backend
    holds them and in whatever order they were written."""
    rows = {str(r[table.key]): _canonical(r) for r in table.scan()}
    digest = hashlib.sha256()
    for key in sorted(rows):
        digest.update(rows[key].encode())
        digest.update(b"\n")
    return len(rows), digest.hexdigest()


def _canonical(row: Mapping[str, Any]) -> str:
    return json.dumps(dict(row), sort_keys=True, separators=(",", ":"), default=str)


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
