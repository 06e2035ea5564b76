"""What the fleet benchmark watches beside the load: CPU by process, and the state's locks.

:class:`CpuProbe` reads ``/proc`` (Linux): the CPU seconds each group of processes used
between two snapshots (the replicas, PostgreSQL's postmaster and its backends, the Chroma
server, the S3 server, this process's client threads), and the whole machine's busy
time, so that what other work on the shared cores took shows as the remainder.

:class:`LockProbe` asks PostgreSQL every :data:`LOCK_SAMPLE_S` whether the state's
write lock (the advisory transaction lock every write transaction takes: see
:mod:`sidecar.storage.postgres`) is held and how many transactions wait for it, whether
the group publisher's lock is held, and how many cold records wait to be published:
the share of samples that saw the lock held is its utilisation.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

LOCK_SAMPLE_S = 0.05
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
    """Samples the state's write lock, the publisher's lock and the pending records of
    one schema on a connection of its own, in a thread, until :meth:`stop`."""

    QUERY = (
        "SELECT count(*) FILTER (WHERE classid = %s AND objid = %s AND granted), "
        "count(*) FILTER (WHERE classid = %s AND objid = %s AND NOT granted), "
        "count(*) FILTER (WHERE classid = %s AND objid = %s AND granted) "
        "FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1"
    )

    def __init__(self, url: str, schema: str) -> None:
        self.url = url
        self.schema = schema
        self.params = (
            *_halves(lock_key(schema, "state")),
            *_halves(lock_key(schema, "state")),
            *_halves(lock_key(schema, "publish")),
        )
        self.samples: list[tuple[int, int, int, int]] = []
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
                held, waiting, publishing = conn.execute(self.QUERY, self.params).fetchone() or (
                    0,
                    0,
                    0,
                )
                try:
                    row = conn.execute(pending).fetchone()
                except psycopg.errors.UndefinedTable:
                    row = (0,)
                self.samples.append((held, waiting, publishing, int(row[0]) if row else 0))

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=10)
        n = len(self.samples)
        if not n:
            return {"samples": 0}
        return {
            "samples": n,
            "state_lock_held": round(sum(1 for s in self.samples if s[0]) / n, 3),
            "state_lock_waiters_mean": round(sum(s[1] for s in self.samples) / n, 2),
            "state_lock_waiters_max": max(s[1] for s in self.samples),
            "publisher_busy": round(sum(1 for s in self.samples if s[2]) / n, 3),
            "pending_mean": round(sum(s[3] for s in self.samples) / n, 1),
            "pending_max": max(s[3] for s in self.samples),
        }
