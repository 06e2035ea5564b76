"""An S3 server for the tests, in its own process: moto's, on 127.0.0.1 and a port the
OS chose.  It honours conditional writes (``If-None-Match: *``), which Delta's commits
rely on.

Run as ``python -m tests.cold_store.s3server``: prints ``port <n>`` once listening, then
reads commands on stdin: ``stop`` (the port refuses connections; the objects are kept),
``start`` (listening again on the same port); end of input ends it.
"""

from __future__ import annotations

import logging
import sys

from moto.server import ThreadedMotoServer


def main() -> None:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    _host, port = server.get_host_and_port()
    running = True
    print(f"port {port}", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "stop" and running:
            server.stop()
            running = False
        elif command == "start" and not running:
            # moto keeps its buckets in this process, so a new server serves them again
            server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
            server.start()
            running = True
        print(f"ok {command}", flush=True)
    if running:
        server.stop()


if __name__ == "__main__":
    main()
