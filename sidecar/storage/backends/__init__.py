"""The databases a state lives on: SQLite in the home (one writer) and PostgreSQL
(replicas sharing one state), behind :class:`sidecar.storage.base.Database`; the
repositories beside this package hold each concept's tables and statements."""
