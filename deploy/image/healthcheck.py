"""The image's HEALTHCHECK: exit 0 when the sidecar serving the home answers its
readiness route (``/readyz``) with 200, else 1 with the reason on stderr.

The server is found as the CLI finds it, through the home's ``server.json`` (written
once the server listens, whatever ``--port`` it was given), unless a URL is given as
the argument.  The route needs the bearer token, read as ``sidecar serve`` reads it:
``$SIDECAR_TOKEN``, else the home's ``token`` file.  Standard library only: it starts
beside the server at every interval.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def home() -> Path:
    return Path(os.environ.get("SIDECAR_HOME") or ".sidecar")


def readiness_url() -> str:
    """``/readyz`` of the URL the server announced; a server bound to every address
    (``0.0.0.0``, ``::``) is asked on the loopback."""
    url = json.loads((home() / "server.json").read_text())["url"]
    parts = urlsplit(str(url))
    netloc = parts.netloc.replace("0.0.0.0", "127.0.0.1").replace("[::]", "[::1]")
    return urlunsplit((parts.scheme, netloc, "/readyz", "", ""))


def token() -> str:
    configured = os.environ.get("SIDECAR_TOKEN", "").strip()
    if configured:
        return configured
    return (home() / "token").read_text().strip()


def main(argv: list[str]) -> int:
    try:
        url = argv[1] if len(argv) > 1 else readiness_url()
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token()}"})
        with urllib.request.urlopen(request, timeout=4) as response:
            status: int = response.status
    except (OSError, ValueError, KeyError) as exc:
        # not serving yet (no server.json), a refused connection, a 503 (not ready: its
        # body says why), no token
        print(f"not ready: {exc}", file=sys.stderr)
        return 1
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
