"""Where the sidecar's state lives, behind one small interface (:mod:`.base`): one
repository per concept (its tables and statements) in this package, the databases in
:mod:`.backends`:

- :mod:`.backends.sqlite`: the embedded default, one SQLite file under the home;
- :mod:`.backends.postgres`: shared state in PostgreSQL (``SIDECAR_DATABASE_URL``), for
  several sidecars on one memory.

The backend is chosen in one place, where a home opens its stores
(:func:`sidecar.app.home.open_state`); every other module sees only a
:class:`~.base.Database`.  :mod:`.schema` versions the tables.
"""

from sidecar.storage.base import (
    Connection,
    Cursor,
    Database,
    DatabaseError,
    Lock,
    MissingTable,
    SchemaTooNew,
)
from sidecar.storage.schema import Migration

__all__ = [
    "Connection",
    "Cursor",
    "Database",
    "DatabaseError",
    "Lock",
    "Migration",
    "MissingTable",
    "SchemaTooNew",
]
