"""A request whose array claims more elements than its frame holds is refused as malformed before
kio reads it: kio's native reader reserves memory by the claimed count, and a failed allocation
there aborts the whole process (checked in a child process, so the test survives it)."""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from tidemark.wire.codec import decode_request
from tidemark.wire.errors import MalformedRequest
from tidemark.wire.api_keys import ApiKey

# FindCoordinator v4 (flexible): header v2, then key_type int8, coordinator_keys as a compact
# array whose count (a uvarint) claims 2**34 - 1 strings in a frame of a few bytes.
HUGE_KEYS = (struct.pack(">hhi", ApiKey.FIND_COORDINATOR, 4, 1) + struct.pack(">h", 1) + b"c" + b"\x00"
             + b"\x01" + b"\xff\xff\xff\xff\x3f" + b"\x02k" + b"\x00")
# DescribeTransactions v0: transactional_ids claiming 2**34 - 1 strings
HUGE_IDS = struct.pack(">hhi", ApiKey.DESCRIBE_TRANSACTIONS, 0, 1) + struct.pack(">h", 1) + b"c" + b"\x00" + b"\xff\xff\xff\xff\x3f" + b"\x00"


@pytest.mark.parametrize("frame", [HUGE_KEYS, HUGE_IDS], ids=["find_coordinator", "describe_transactions"])
def test_a_huge_array_count_is_malformed_not_a_crash(frame):
    script = ("import sys; from tidemark.wire.codec import decode_request\n"
              "from tidemark.wire.api_keys import ApiKey\n"
              "from tidemark.wire.errors import MalformedRequest\n"
              f"frame = {frame!r}\n"
              "try:\n    decode_request(frame, {ApiKey.FIND_COORDINATOR: (0, 6), ApiKey.DESCRIBE_TRANSACTIONS: (0, 0)})\nexcept MalformedRequest:\n    sys.exit(3)\n")
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert child.returncode == 3, child.stderr.decode()[-2000:]


def test_a_well_formed_request_with_arrays_still_decodes():
    frame = (struct.pack(">hhi", ApiKey.FIND_COORDINATOR, 4, 1) + struct.pack(">h", 1) + b"c" + b"\x00"
             + b"\x01" + b"\x03" + b"\x02a" + b"\x02b" + b"\x00")
    request = decode_request(frame, {ApiKey.FIND_COORDINATOR: (0, 6)})
    assert list(request.body.coordinator_keys) == ["a", "b"]
    with pytest.raises(MalformedRequest):
        decode_request(frame[:-3], {ApiKey.FIND_COORDINATOR: (0, 6)})
