"""What the fleet benchmark watches beside the load: CPU by process, and the state's locks.

:class:`CpuProbe` reads ``/proc`` (Linux): the CPU seconds each group of processes used
between two snapshots (the replicas, PostgreSQL's postmaster and its backends, the Chroma
server, the S3 server, this process's client threads), and the whole machine's busy
time, so that what other work on the shared cores took shows as the remainder.

:class:`LockProbe` asks PostgreSQL every :data:`LOCK_SAMPLE_S` which of the state's
advisory locks are held and how many transactions wait for each (:data:`WATCHED`: the
write locks of :mod:`sidecar.storage.backends.postgres`, those of a library from before they
were split included, and the group publisher's), and how many cold records wait to be
published: the share of samples that saw a lock held is its utilisation.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

LOCK_SAMPLE_S = 0.05
WATCHED = ("state", "learned", "archive", "commit", "publish")
"""The locks sampled: ``state``, every write's until the write locks were split by
concern; ``learned``, a report's since (so :data:`REPORT_LOCKS` is the lock a report
takes on either library); ``archive``, the publisher's removal of what it published;
``commit``, every write's last few round trips; ``publish``, the group publisher's
session lock."""
REPORT_LOCKS = ("state", "learned")
PROC = Path("/proc")


def _ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        return 100.0


def _processes() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds used so far) of every readable process."""
    out: dict[int, tuple[int, float]] = {}
    tick = _ticks()
    for entry in PROC.iterdir() if PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        # the command name is in parentheses and may hold spaces: split after it
        fields = raw[raw.rindex(")") + 2 :].split()
        out[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    return out


def _machine_busy() -> float:
    """CPU seconds every core spent busy since boot (``/proc/stat``)."""
    try:
        first = (PROC / "stat").read_text().splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return 0.0
    values = [int(v) for v in first]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / _ticks()


def _grouped(roots: Mapping[str, list[int]]) -> dict[str, float]:
    """CPU seconds so far per group: a process counts for the first root on its way up
    the tree of parents (a root's descendants are its group's)."""
    procs = _processes()
    owner = {pid: name for name, pids in roots.items() for pid in pids}
    totals = dict.fromkeys(roots, 0.0)
    for pid, (_parent, cpu) in procs.items():
        walk, hops = pid, 0
        while walk in procs and walk not in owner and hops < 64:
            walk, hops = procs[walk][0], hops + 1
        if walk in owner:
            totals[owner[walk]] += cpu
    return totals


class CpuProbe:
    """CPU used per group of processes between :meth:`start` and :meth:`stop`."""

    def __init__(self, roots: Mapping[str, list[int]]) -> None:
        self.roots = dict(roots)
        self._before: dict[str, float] = {}
        self._machine = 0.0

    def start(self) -> None:
        self._before = _grouped(self.roots)
        self._machine = _machine_busy()

    def stop(self, wall_s: float) -> dict[str, Any]:
        """Cores used on average per group over ``wall_s`` (1.0: one core all the
        time); ``other`` is the machine's busy time no group accounts for."""
        after = _grouped(self.roots)
        used = {k: max(0.0, after[k] - self._before.get(k, 0.0)) for k in after}
        machine = max(0.0, _machine_busy() - self._machine)
        cores = {k: round(v / wall_s, 2) for k, v in used.items()} if wall_s else {}
        if wall_s:
            cores["other"] = round(max(0.0, machine - sum(used.values())) / wall_s, 2)
            cores["machine"] = round(machine / wall_s, 2)
        return {"cores": cores, "cpus": os.cpu_count()}


def lock_key(schema: str, name: str) -> int:
    """The advisory-lock key the sidecar derives for ``name`` in ``schema``
    (``PostgresDatabase.key``)."""
    digest = hashlib.sha256(f"sidecar:{schema}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _halves(key: int) -> tuple[int, int]:
    """A bigint advisory key as ``pg_locks`` shows it: (classid, objid)."""
    unsigned = key & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


class LockProbe:
    """Samples the state's locks (:data:`WATCHED`) and the pending records of one schema
    on a connection of its own, in a thread, until :meth:`stop`."""

    QUERY = (
        "SELECT classid::bigint, objid::bigint, granted FROM pg_locks "
        "WHERE locktype = 'advisory' AND objsubid = 1"
    )

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self.names = {_halves(lock_key(schema, name)): name for name in WATCHED}
        self.samples: list[tuple[dict[str, tuple[int, int]], int]] = []
        """Per sample: lock name -> (held, waiting), and the records pending."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lock-probe", daemon=True)

    def start(self) -> LockProbe:
        self._thread.start()
        return self

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            pending = f"SELECT count(*) FROM {self.schema}.archive_pending"
            while not self._stop.wait(LOCK_SAMPLE_S):
                locks = {name: (0, 0) for name in WATCHED}
                for classid, objid, granted in conn.execute(self.QUERY).fetchall():
                    name = self.names.get((int(classid), int(objid)))
                    if name is not None:
                        held, waiting = locks[name]
                        locks[name] = (held + 1, waiting) if granted else (held, waiting + 1)
                try:
                    row = conn.execute(pending).fetchone()
                except psycopg.errors.UndefinedTable:
                    row = (0,)
                self.samples.append((locks, int(row[0]) if row else 0))

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=10)
        n = len(self.samples)
        if not n:
            return {"samples": 0}

        def held(names: tuple[str, ...]) -> float:
            return round(sum(1 for s, _ in self.samples if any(s[k][0] for k in names)) / n, 3)

        waiting = [sum(s[k][1] for k in REPORT_LOCKS) for s, _ in self.samples]
        return {
            "samples": n,
            "report_lock_held": held(REPORT_LOCKS),
            "report_lock_waiters_mean": round(sum(waiting) / n, 2),
            "report_lock_waiters_max": max(waiting),
            "held": {name: held((name,)) for name in WATCHED},
            "waiters_mean": {
                name: round(sum(s[name][1] for s, _ in self.samples) / n, 2) for name in WATCHED
            },
            "publisher_busy": held(("publish",)),
            "pending_mean": round(sum(p for _, p in self.samples) / n, 1),
            "pending_max": max(p for _, p in self.samples),
        }
