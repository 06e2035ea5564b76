"""Smoke test of the sidecar's image (`make image-test`, after `make image`).

Starts the image as a user would, with its home on a fresh named volume and the token
from ``SIDECAR_TOKEN``, waits on ``/readyz``, then over HTTP: the token is required, the
demo catalog is added, a lookup finds the right tool, an abandoned chain is reported
and archived, a lookup after its prefix withholds the fatal continuation, a plan check
blocks the fatal sequence and allows the harmless ones, and its cold record is read
back.  The image's HEALTHCHECK passes; a stop is clean (SIGTERM to ``sidecar serve`` as
the container's first process, exit 0), and a restart on the same volume keeps
everything.  Without a token, the image's command refuses to serve.  The container and
the volume are removed at the end, whatever happened.

Any wrong answer fails loudly: the step, what was expected, what came back and the end
of the container's log; the exit status is then 1.  Standard library only, so that it
runs with any Python >= 3.11 beside podman (deploy/image/podman.sh runs podman as hosts
like the build machine need).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PODMAN = str(HERE / "podman.sh")
CATALOG = HERE.parents[1] / "sidecar" / "demo" / "catalog.jsonl"
HOME = "/var/lib/sidecar"

FATAL = ["web_search", "html_parser", "llm_extractor"]
RULE = "IF html_parser output > 5 MB THEN llm_extractor times out"
REPORT = {
    "topology": FATAL,
    "outcome": "abandoned",
    "failure": {"signature": "timeout after 30s on 7.2 MB payload", "kind": None, "error": {}},
    "constraint": {
        "rule": RULE,
        "when": [{"step": "html_parser", "field": "payload_bytes", "op": ">", "value": 5_000_000}],
    },
    "session_id": "smoke-1",
}
LARGE = {"payload_bytes": 7_200_000}


class Failed(Exception):
    """A step of the smoke test did not get the answer it expects."""


def expect(ok: bool, what: str, got: Any) -> None:
    if not ok:
        raise Failed(f"{what}; got: {json.dumps(got)[:2000]}")


def podman(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``podman ARGS``; a non-zero exit is a failure, with what podman printed."""
    done = subprocess.run(
        [PODMAN, *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise Failed(
            f"podman {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done


def free_port() -> int:
    # the container shares the host's network: its port must be free here
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Api:
    """JSON over HTTP to the sidecar in the container."""

    def __init__(self, port: int, token: str) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.token = token

    def request(
        self, method: str, path: str, body: Any = None, token: str | None = "default"
    ) -> tuple[int, Any]:
        """(status, decoded JSON body); ``token=None`` sends no Authorization header."""
        headers = {"content-type": "application/json"}
        bearer = self.token if token == "default" else token
        if bearer is not None:
            headers["Authorization"] = f"Bearer {bearer}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=120) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def get(self, path: str) -> Any:
        status, body = self.request("GET", path)
        expect(status == 200, f"GET {path} answers 200 (status {status})", body)
        return body

    def post(self, path: str, body: Any) -> Any:
        status, answer = self.request("POST", path, body)
        expect(status == 200, f"POST {path} answers 200 (status {status})", answer)
        return answer


class Container:
    """One container of the image, named, its home on a named volume."""

    def __init__(self, image: str, port: int, token: str) -> None:
        tag = secrets.token_hex(4)
        self.image = image
        self.name = f"sidecar-smoke-{tag}"
        self.volume = f"sidecar-smoke-home-{tag}"
        self.port = port
        self.token = token

    def start(self) -> None:
        podman("volume", "create", self.volume)
        os.environ["SIDECAR_TOKEN"] = self.token
        # the image's own entrypoint and command, on a free port of the shared network;
        # SIDECAR_TOKEN is passed by name, so its value is on no command line
        podman(
            "run", "--detach", "--name", self.name, "--network", "host",
            "--volume", f"{self.volume}:{HOME}", "--env", "SIDECAR_TOKEN",
            self.image, "serve", "--host", "0.0.0.0", "--port", str(self.port),
        )  # fmt: skip

    def running(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Running}}", self.name).stdout
        return state.strip() == "true"

    def exit_code(self) -> int:
        return int(podman("inspect", "--format", "{{.State.ExitCode}}", self.name).stdout)

    def logs(self) -> str:
        try:
            done = podman("logs", "--tail", "40", self.name, timeout=60)
        except (Failed, subprocess.TimeoutExpired) as exc:
            return f"(no logs: {exc})"
        return done.stdout + done.stderr

    def remove(self) -> None:
        for args in (("rm", "--force", "--time", "0", self.name), ("volume", "rm", self.volume)):
            subprocess.run([PODMAN, *args], capture_output=True, timeout=300, check=False)


def wait_ready(api: Api, container: Container, timeout: float) -> float:
    """Seconds until ``/readyz`` answers 200 ready; a container that stops, or a server
    not ready in time, fails."""
    start = time.monotonic()
    last: Any = None
    while time.monotonic() - start < timeout:
        try:
            status, last = api.request("GET", "/readyz")
            if status == 200 and isinstance(last, dict) and last.get("ready") is True:
                return time.monotonic() - start
        except (OSError, ValueError) as exc:
            last = str(exc)
        if not container.running():
            raise Failed(f"the container stopped (exit {container.exit_code()}) before ready")
        time.sleep(0.5)
    raise Failed(f"not ready after {timeout:.0f} s; last /readyz: {last}")


def check_auth(api: Api) -> None:
    status, body = api.request("GET", "/livez", token=None)
    expect(status == 200, "/livez needs no token", body)
    status, body = api.request("GET", "/readyz", token=None)
    expect(status == 401, "/readyz without the token is 401", body)
    expect(body["error"]["code"] == "unauthorized", "the 401 is the error envelope", body)
    status, body = api.request("POST", "/v1/search", {"query": "x"}, token="w" * 32)
    expect(status == 401, "a wrong token is 401", body)


def add_catalog(api: Api) -> int:
    tools = [json.loads(line) for line in CATALOG.read_text().splitlines() if line.strip()]
    added = api.post("/v1/tools", {"tools": tools})
    ids = {t["tool_id"] for t in tools}
    expect(set(added["added"]) == ids, f"all {len(ids)} tools are added", added)
    return len(ids)


def lookup(api: Api) -> None:
    found = api.post("/v1/search", {"query": "weather forecast for the next days", "k": 3})
    top = [h["tool_id"] for h in found["hits"]]
    expect(top[:1] == ["weather_forecast"], "the forecast tool ranks first", found)
    expect(found["abstained"] is False, "the lookup does not abstain", found)


def report(api: Api) -> str:
    results = api.post("/v1/reports", {"reports": [REPORT]})["results"]
    expect(len(results) == 1 and results[0]["status"] == "archived", "archived", results)
    pointer: str = results[0]["pointer"]
    expect(pointer.startswith("cold://chains/"), "a cold storage pointer", results)
    return pointer


def constrained_lookup(api: Api, pointer: str) -> None:
    body = {
        "query": "extract prices from the page text",
        "k": 5,
        "after": FATAL[:-1],
        "context": LARGE,
    }
    found = api.post("/v1/search", body)
    hits = [h["tool_id"] for h in found["hits"]]
    expect("llm_extractor" not in hits, "the fatal continuation is not a hit", found)
    withheld = found["withheld"]
    expect(
        [w["tool_id"] for w in withheld] == ["llm_extractor"] and withheld[0]["pointer"] == pointer,
        "the fatal continuation is withheld, with the rule's pointer",
        found,
    )


def checks(api: Api, pointer: str) -> None:
    blocked = api.post("/v1/check", {"plan": FATAL, "context": LARGE})
    expect(blocked["safe"] is False, "the fatal sequence is blocked", blocked)
    collision = blocked["collisions"][0]
    expect(
        collision["pointer"] == pointer and collision["rule"] == RULE,
        "the block names the rule and its pointer",
        blocked,
    )
    small = api.post("/v1/check", {"plan": FATAL, "context": {"payload_bytes": 1000}})
    expect(small["safe"] is True, "the same plan on a small payload is allowed", small)
    other = [*FATAL[:-1], "regex_extractor"]
    elsewhere = api.post("/v1/check", {"plan": other, "context": LARGE})
    expect(elsewhere["safe"] is True, "another continuation is allowed", elsewhere)


def audit(api: Api, pointer: str) -> None:
    record = api.get("/v1/audit?" + urllib.parse.urlencode({"pointer": pointer}))
    expect(record["topology"] == FATAL, "the cold record holds the chain", record)


def healthcheck(container: Container) -> None:
    done = subprocess.run(
        [PODMAN, "healthcheck", "run", container.name],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    expect(done.returncode == 0, "the image's HEALTHCHECK passes", done.stdout + done.stderr)


def restart(api: Api, container: Container, tools: int, timeout: float) -> float:
    """Stop (SIGTERM, clean exit 0), start again on the same volume: everything is
    still there.  Returns the seconds from the start to ready."""
    podman("stop", "--time", "30", container.name)
    expect(container.exit_code() == 0, "SIGTERM stops the server cleanly", container.exit_code())
    podman("start", container.name)
    seconds = wait_ready(api, container, timeout)
    page = api.get("/v1/tools?limit=200")
    expect(len(page["tools"]) == tools, f"the {tools} tools are still there", page)
    blocked = api.post("/v1/check", {"plan": FATAL, "context": LARGE})
    expect(blocked["safe"] is False, "the fatal sequence is still blocked", blocked)
    return seconds


def refuses_without_token(container: Container) -> None:
    """The image's own command with no token configured (in the running container, on a
    home of its own): `sidecar serve` must refuse to bind 0.0.0.0 (exit 2), naming the
    fix, rather than serve with a token nobody configured."""
    done = subprocess.run(
        [PODMAN, "exec", container.name, "env", "-u", "SIDECAR_TOKEN",
         "SIDECAR_HOME=/tmp/no-token-home", "sidecar", "serve", "--host", "0.0.0.0",
         "--port", str(free_port())],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    output = done.stdout + done.stderr
    expect(
        done.returncode == 2 and "without a token" in output,
        "without a token the image refuses to serve on 0.0.0.0 (exit 2)",
        {"exit": done.returncode, "output": output[-1500:]},
    )


def run(image: str, timeout: float, keep: bool) -> None:
    started = time.monotonic()

    def step(what: str, action: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        result = action()
        print(f"ok  {what} ({time.monotonic() - t0:.1f} s)", flush=True)
        return result

    container = Container(image, free_port(), secrets.token_urlsafe(32))
    api = Api(container.port, container.token)
    try:
        step(f"container {container.name} started, home on volume {container.volume}",
             container.start)  # fmt: skip
        ready = step("ready (/readyz)", lambda: wait_ready(api, container, timeout))
        step("the token is required", lambda: check_auth(api))
        tools = step("the demo catalog is added", lambda: add_catalog(api))
        step("a lookup finds the tool", lambda: lookup(api))
        pointer = step("an abandoned chain is reported and archived", lambda: report(api))
        step("a lookup after its prefix withholds the fatal continuation",
             lambda: constrained_lookup(api, pointer))  # fmt: skip
        step("a check blocks the fatal sequence, allows the others", lambda: checks(api, pointer))
        step("the cold record is read back", lambda: audit(api, pointer))
        step("the HEALTHCHECK passes", lambda: healthcheck(container))
        step("without a token `sidecar serve` refuses to serve on 0.0.0.0",
             lambda: refuses_without_token(container))  # fmt: skip
        again = step("stopped cleanly and restarted on the same volume, nothing lost",
                     lambda: restart(api, container, tools, timeout))  # fmt: skip
    except BaseException:
        print(f"--- the container's log (last lines):\n{container.logs()}", file=sys.stderr)
        raise
    finally:
        if keep:
            print(f"kept: container {container.name}, volume {container.volume}")
        else:
            container.remove()
    print(
        f"image smoke test passed in {time.monotonic() - started:.0f} s: ready {ready:.1f} s "
        f"after start, {again:.1f} s after a restart"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="localhost/toolchain-sidecar:latest")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for ready")
    parser.add_argument("--keep", action="store_true", help="leave the container and volume")
    args = parser.parse_args()
    try:
        run(args.image, args.timeout, args.keep)
    except Failed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
