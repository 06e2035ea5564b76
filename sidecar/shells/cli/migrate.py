"""``sidecar migrate``: the state's schema brought to this version (no target), or a
home's local state and archive copied into shared stores (``--to-database``,
``--to-cold``)."""

from __future__ import annotations

import argparse

from sidecar.errors import EXIT_OK
from sidecar.settings import Settings
from sidecar.shells.cli.commands import home_of
from sidecar.shells.cli.output import emit


def migrate(args: argparse.Namespace) -> int:
    settings = Settings.load(home=home_of(args), chroma_url=args.chroma_url)
    if args.to_database is None and args.to_cold is None:
        return migrate_schema(args, settings)
    from sidecar.app.home import migrate as migrate_home

    copied = migrate_home(settings, args.to_database, args.to_cold)

    def human() -> str:
        lines = []
        if "tables" in copied:
            total = sum(copied["tables"].values())
            lines.append(
                f"state: {total} row(s) in {len(copied['tables'])} table(s) copied; every "
                "count matches. Set SIDECAR_DATABASE_URL to use the copy"
            )
        if "cold" in copied:
            parts = ", ".join(
                f"{name} {c['rows']} row(s) (digest {c['digest'][:12]})"
                for name, c in copied["cold"].items()
            )
            lines.append(
                f"archive: {parts}; every row matches. Set SIDECAR_COLD_URL to use the copy"
            )
        return "\n".join(lines)

    emit(args, copied, human)
    return EXIT_OK


def migrate_schema(args: argparse.Namespace, settings: Settings) -> int:
    """``sidecar migrate`` with no target: the state's schema brought to this version."""
    from sidecar.app.home import migrate_schema as migrate_state

    done = migrate_state(settings)

    def human() -> str:
        did = []
        if done.created:
            did.append(f"{len(done.created)} table(s) created")
        if done.applied:
            did.append(f"{len(done.applied)} migration(s) applied ({'; '.join(done.applied)})")
        return f"state schema at version {done.version} ({done.location}): " + (
            "; ".join(did) if did else "nothing to do"
        )

    emit(args, done, human)
    return EXIT_OK
