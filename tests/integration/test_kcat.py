"""kcat (librdkafka's command-line client, a Debian package) lists, produces and consumes."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.integration.clients import create_topic

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (make test installs it)")


def kcat(*args: str, stdin: bytes | None = None) -> str:
    result = subprocess.run(["kcat", *args], input=stdin, capture_output=True, timeout=60, check=True)
    return result.stdout.decode()


def test_kcat_list_produce_consume(broker):
    create_topic(broker.bootstrap, "kcat-topic", 2)
    listing = kcat("-b", broker.bootstrap, "-L")
    assert 'topic "kcat-topic" with 2 partitions' in listing
    assert "broker 0 at 127.0.0.1" in listing

    lines = b"".join(b"line-%d\n" % i for i in range(100))
    kcat("-b", broker.bootstrap, "-P", "-t", "kcat-topic", "-p", "1", "-X", "acks=all", stdin=lines)
    out = kcat("-b", broker.bootstrap, "-C", "-t", "kcat-topic", "-p", "1", "-o", "beginning", "-e",
               "-f", "%o %s\n")
    assert out.splitlines() == [f"{i} line-{i}" for i in range(100)]

    # Consume the whole topic (both partitions) until the end.
    everything = kcat("-b", broker.bootstrap, "-C", "-t", "kcat-topic", "-o", "beginning", "-e", "-f", "%s\n")
    assert sorted(everything.splitlines()) == sorted(f"line-{i}" for i in range(100))
