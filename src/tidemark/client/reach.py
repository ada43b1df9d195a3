"""Is a bootstrap server there at all? One TCP connect, before any client or Spark is started.

librdkafka retries an address nobody listens on until its own timeouts run out, logging each
attempt; a plain connect answers in milliseconds and lets a command fail with one clear line.
"""

from __future__ import annotations

import socket
import time


def split_host_port(server: str) -> tuple[str, int | None]:
    """"host:port" or "[v6addr]:port", optionally with a "PLAINTEXT://"-style scheme in front."""
    server = server.split("://", 1)[-1]
    host, sep, port = server.rpartition(":")
    if not sep or not port.isdigit():
        return server, None
    return host.strip("[]"), int(port)


def unreachable(bootstrap: str, timeout_s: float) -> str | None:
    """None when some server of the comma list accepts a connection within timeout_s, else why not."""
    deadline = time.monotonic() + timeout_s
    last = "no address given"
    for server in (part.strip() for part in bootstrap.split(",")):
        if not server:
            continue
        host, port = split_host_port(server)
        if port is None:
            last = f"{server!r} is not HOST:PORT"
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timed out"
        try:
            with socket.create_connection((host, port), timeout=remaining):
                return None
        except OSError as exc:
            last = exc.strerror or str(exc) or type(exc).__name__
    return last
