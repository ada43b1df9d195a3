"""A request whose array (or string) claims more than its frame holds is refused as malformed before
kio reads it: kio's native reader reserves memory by the claimed count, and a failed allocation
there aborts the whole process (checked in a child process, so the test survives it)."""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from kio.index import load_request_schema

from tidemark.wire.codec import KIO_API_RANGES, decode_request
from tidemark.wire.errors import MalformedRequest
from tidemark.wire.request_guard import needs_walk
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


# Fetch v12 (flexible, one of the hot paths): replica_id, max_wait_ms, min_bytes, max_bytes,
# isolation_level, session_id, session_epoch, then topics as a compact array claiming 2**34 - 1.
HUGE_FETCH_TOPICS = (struct.pack(">hhi", ApiKey.FETCH, 12, 1) + struct.pack(">h", 1) + b"c" + b"\x00"
                     + struct.pack(">iiiibii", -1, 500, 1, 1 << 20, 0, 0, -1) + b"\xff\xff\xff\xff\x3f" + b"\x00")


def test_a_flexible_hot_path_request_is_walked_too():
    """Fetch, OffsetFetch and ConsumerGroupHeartbeat skip the walk only in non-flexible versions:
    a compact count is a varint, so any garbage byte there claims a huge array."""
    script = ("import sys; from tidemark.wire.codec import decode_request\n"
              "from tidemark.wire.api_keys import ApiKey\n"
              "from tidemark.wire.errors import MalformedRequest\n"
              f"try:\n    decode_request({HUGE_FETCH_TOPICS!r}, {{ApiKey.FETCH: (4, 17)}})\n"
              "except MalformedRequest as e:\n    print(e); sys.exit(3)\n")
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert child.returncode == 3, child.stderr.decode()[-2000:]
    assert b"Tried to allocate a collection of size 17179869182" in child.stdout


def test_which_bodies_are_walked():
    assert needs_walk(ApiKey.FETCH, load_request_schema(ApiKey.FETCH, 12))  # flexible
    assert not needs_walk(ApiKey.FETCH, load_request_schema(ApiKey.FETCH, 11))  # hot path, not flexible
    assert not needs_walk(ApiKey.OFFSET_FETCH, load_request_schema(ApiKey.OFFSET_FETCH, 5))
    assert needs_walk(ApiKey.DESCRIBE_GROUPS, load_request_schema(ApiKey.DESCRIBE_GROUPS, 0))  # array of strings
    assert not needs_walk(ApiKey.OFFSET_COMMIT, load_request_schema(ApiKey.OFFSET_COMMIT, 2))  # arrays of structs only


def test_every_flexible_request_schema_is_walked():
    """A type the walk did not know would leave a schema unwalked, and its arrays exposed."""
    for api_key, (low, high) in KIO_API_RANGES.items():
        for version in range(low, high + 1):
            schema = load_request_schema(api_key, version)
            if schema.__flexible__:
                assert needs_walk(api_key, schema), (api_key, version)


def test_a_string_longer_than_the_frame_is_refused():
    # DescribeGroups v5 (flexible): groups = ["k"], the string's compact length claiming 2**20 bytes.
    header = struct.pack(">hhi", ApiKey.DESCRIBE_GROUPS, 5, 1) + struct.pack(">h", 1) + b"c" + b"\x00"
    good = header + b"\x02" + b"\x02k" + b"\x00" + b"\x00"
    assert list(decode_request(good, {ApiKey.DESCRIBE_GROUPS: (0, 5)}).body.groups) == ["k"]
    with pytest.raises(MalformedRequest, match="string of size 1048576"):
        decode_request(header + b"\x02" + b"\x81\x80\x40k" + b"\x00" + b"\x00", {ApiKey.DESCRIBE_GROUPS: (0, 5)})
