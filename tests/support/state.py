"""A state on a database, its schema prepared as a home's would be."""

from __future__ import annotations

from sidecar.storage import Database
from sidecar.storage.schema import prepare
from sidecar.storage.state import MIGRATIONS, SCHEMAS, State


def state_on(db: Database) -> State:
    prepare(db, SCHEMAS, MIGRATIONS)
    return State(db)
