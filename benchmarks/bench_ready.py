"""Question: how soon does ``sidecar serve`` answer lookups on the default path
(all-MiniLM-L6-v2 under onnxruntime), and where does its start go?

The ``ready`` part of ``bench_serve`` alone (that benchmark also embeds a catalog and
times lookups, minutes of work): a real ``sidecar serve --port 0`` on a home holding the
demo catalog (62 tools), from its start to the first ``GET /readyz`` answering 200 (URL
from the home's ``server.json``, the home's token), then to its first ``POST
/v1/search``, which must find tools.  Starts alternate between the default embedder and
the hashing stand-in (no model: the floor of a start), one untimed start of each
first (warm disk; the ONNX files built once into a model cache kept for the run).  Each
line the server writes on stderr is timed as it arrives (its phases: the home opened,
the index and the model, serving).  ``--importtime``: one more start of the default
path with ``-X importtime``, its slowest top-level imports.

``--baseline DIR``: the default path served from another checkout (an earlier commit,
unpacked with ``git archive``) joins the rotation, for a before/after in one run.

``python -m benchmarks.bench_ready [--runs N] [--importtime] [--baseline DIR] [--out
FILE]``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_serve import _build_cache, build_demo_home
from benchmarks.harness.progress import progress
from benchmarks.harness.results import emit, machine, revision
from benchmarks.harness.services import read_server_url, sidecar_argv, stop_process
from benchmarks.serve_process import FIRST_QUERY, POLL_S, START_TIMEOUT_S, server_env

VARIANTS = {"onnx": "minilm", "hashing": "hashing"}
TARGET_S = 3.0
_IMPORT = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


def one_start(home: Path, env: dict[str, str]) -> dict[str, Any]:
    import httpx

    lines: list[tuple[float, str]] = []
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*sidecar_argv(), "serve", "--port", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append((time.perf_counter() - started, line.rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while (url := read_server_url(home, proc.pid)) is None:
            _alive(proc, started, lines)
            time.sleep(POLL_S)
        url_s = time.perf_counter() - started
        token = (home / "token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        not_ready = 0
        while True:
            try:
                answer = httpx.get(f"{url}/readyz", headers=headers, timeout=30)
                if answer.status_code == 200:
                    break
                not_ready += 1
            except httpx.HTTPError:
                pass
            _alive(proc, started, lines)
            time.sleep(POLL_S)
        ready_s = time.perf_counter() - started
        found = httpx.post(
            f"{url}/v1/search", json={"query": FIRST_QUERY, "k": 5}, headers=headers, timeout=120
        )
        found.raise_for_status()
        search_s = time.perf_counter() - started
        hits = len(found.json()["hits"])
    finally:
        stop_process(proc)
        reader.join(timeout=5)
    if hits == 0:
        raise RuntimeError("the first search found nothing: the demo home is empty")
    return {
        "url_s": round(url_s, 3),
        "ready_s": round(ready_s, 3),
        "first_search_s": round(search_s, 3),
        "not_ready_answers": not_ready,
        "phases_s": _phases(lines),
        "lines": lines,
    }


def _alive(proc: subprocess.Popen[str], started: float, lines: list[tuple[float, str]]) -> None:
    code = proc.poll()
    if code is not None:
        tail = "\n".join(text for _, text in lines[-20:])
        raise RuntimeError(f"sidecar serve exited with {code}:\n{tail}")
    if time.perf_counter() - started > START_TIMEOUT_S:
        raise TimeoutError(f"sidecar serve not ready after {START_TIMEOUT_S} s")


def _phases(lines: list[tuple[float, str]]) -> dict[str, float]:
    """When each status line the server writes arrived (its first words as the key)."""
    out: dict[str, float] = {}
    for at, text in lines:
        if text.startswith(("{", "import time:", " ", "token:", "try:")) or not text:
            continue
        key = " ".join(text.split()[:4])
        out.setdefault(key, round(at, 3))
    return out


def importtime(home: Path, env: dict[str, str], top: int = 15) -> list[dict[str, Any]]:
    """The slowest imports of one start (cumulative ms, the first two levels)."""
    start = one_start(home, {**env, "PYTHONPROFILEIMPORTTIME": "1"})
    found: list[dict[str, Any]] = []
    for _, text in start["lines"]:
        match = _IMPORT.match(text)
        if match and len(match.group(3)) <= 2:
            found.append({"module": match.group(4), "cumulative_ms": int(match.group(2)) / 1000})
    found.sort(key=lambda row: -row["cumulative_ms"])
    return found[:top]


def _median(samples: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [float(s[key]) for s in samples]
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def run(runs: int, with_importtime: bool, baseline: Path | None = None) -> dict[str, Any]:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-ready-") as tmp_name:
        tmp = Path(tmp_name)
        cache = tmp / "model-cache"
        progress("ready: building the ONNX files into a fresh model cache")
        _build_cache(cache)
        build_demo_home(tmp / "onnx", cache)
        build_demo_home(tmp / "hashing", None)
        envs = {v: server_env(tmp / v, setting, cache) for v, setting in VARIANTS.items()}
        homes = {v: tmp / v for v in VARIANTS}
        if baseline is not None:
            # the same default path, served by another checkout of the library
            envs["onnx_baseline"] = {**envs["onnx"], "PYTHONPATH": str(baseline)}
            homes["onnx_baseline"] = homes["onnx"]
        names = list(envs)
        for v in names:  # warm disk
            one_start(homes[v], envs[v])
        samples: dict[str, list[dict[str, Any]]] = {v: [] for v in names}
        for i in range(runs):
            shift = i % len(names)
            for v in names[shift:] + names[:shift]:
                sample = one_start(homes[v], envs[v])
                sample.pop("lines")
                samples[v].append(sample)
                progress(f"ready: {v} run {i + 1}: {sample['ready_s']} s")
        imports = importtime(tmp / "onnx", envs["onnx"]) if with_importtime else []
    out: dict[str, Any] = {}
    for v in samples:
        out[v] = {
            "ready_s": _median(samples[v], "ready_s"),
            "url_s": _median(samples[v], "url_s"),
            "first_search_s": _median(samples[v], "first_search_s"),
            "not_ready_answers": sum(int(s["not_ready_answers"]) for s in samples[v]),
            "samples": samples[v],
        }
    onnx = out["onnx"]["ready_s"]["median"]
    return {
        "benchmark": "ready",
        "revision": revision(),
        "machine": machine(),
        "runs": runs,
        **out,
        "model_share_s": round(onnx - out["hashing"]["ready_s"]["median"], 3),
        "slowest_imports": imports,
        "targets": [
            {
                "target": "serve: ready time of the default path (onnx), median",
                "goal": f"<= {TARGET_S:g} s",
                "measured": onnx,
                "met": onnx <= TARGET_S,
            }
        ],
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--importtime", action="store_true")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="another checkout of the repository (e.g. `git archive` of an earlier commit): "
        "its default path joins the rotation as onnx_baseline",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    emit(run(args.runs, args.importtime, args.baseline), args.out)


if __name__ == "__main__":
    main()
