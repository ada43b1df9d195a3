"""The produce validator's compiled record walk (_speedups.produce_records_valid) against the
validator's own Python walk, the reference: on random records well-formed, damaged and written
field by field, `validate_produce` returns the same header or raises the same error (type,
message, per-record errors) whether the compiled walk runs or not; and it does run, and pass,
on what real clients send."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidemark.broker import validator
from tidemark.broker.validator import validate_produce
from tidemark.log.config import LogConfig
from tidemark.records import (
    CompressionType,
    InvalidRecordError,
    RecordValidationError,
    build_batch,
    records_section,
)
from tidemark.records.batch import _produce_records_valid_compiled, produce_records_valid_py
from tests.broker.test_validator import raw_batch
from tests.records.test_speedups import _zigzag_bytes, raw_records

# Not built fails here (an ImportError), not skipped: this compares the compiled walk.
from tidemark.records import _speedups  # isort: skip

PLAIN = LogConfig()
COMPACTED = LogConfig(cleanup_policy="compact,delete")


def _record(offset_delta: int, key: bytes | None, value: bytes | None, headers, ts_delta: int = 0) -> bytes:
    body = bytearray(b"\x00") + _zigzag_bytes(ts_delta) + _zigzag_bytes(offset_delta)
    for field in (key, value):
        body += _zigzag_bytes(-1) if field is None else _zigzag_bytes(len(field)) + field
    body += _zigzag_bytes(len(headers))
    for h_key, h_value in headers:
        body += _zigzag_bytes(len(h_key)) + h_key
        body += _zigzag_bytes(-1) if h_value is None else _zigzag_bytes(len(h_value)) + h_value
    return _zigzag_bytes(len(body)) + bytes(body)


def _outcome(records, config: LogConfig):
    try:
        header = validate_produce(records, config, topic="t", partition=3, internal=False)
        return "returned", header
    except RecordValidationError as e:
        return "raised", type(e), str(e), e.record_errors
    except Exception as e:  # the same type and message, whichever walk raised
        return "raised", type(e), str(e)


def _both(monkeypatch, records, config: LogConfig):
    """validate_produce's outcome with the compiled walk, and with the reference alone."""
    compiled = _outcome(records, config)
    with monkeypatch.context() as m:
        m.setattr(validator, "produce_records_valid", produce_records_valid_py)
        reference = _outcome(records, config)
    return compiled, reference


# Header keys: ASCII (the compiled walk's), other UTF-8 and not UTF-8 at all (the reference's).
header_keys = st.sampled_from([b"", b"h", b"trace-id", "caf\u00e9".encode(), b"\xff", b"ok\xc3"])
header_values = st.one_of(st.none(), st.binary(max_size=5))
keys = st.one_of(st.none(), st.just(b""), st.binary(max_size=12), st.binary(min_size=120, max_size=130))
values = st.one_of(st.none(), st.just(b""), st.binary(max_size=40), st.binary(min_size=1020, max_size=1030))
fields = st.tuples(keys, values, st.lists(st.tuples(header_keys, header_values), max_size=3),
                   st.sampled_from([0, 1, -1, 63, 64, 10**6, -(2**31), 2**40]))


@st.composite
def sections(draw):
    """(section, count): records from a client, as they should be or subtly not (a wrong or
    repeated offset delta, a count that disagrees), damaged bytes, or fields written raw."""
    kind = draw(st.sampled_from(["records", "records", "shuffled", "damaged", "raw"]))
    if kind == "raw":
        return draw(raw_records()), draw(st.sampled_from([1, 2, 3, 6]))
    rows = draw(st.lists(fields, min_size=1, max_size=12))
    deltas = list(range(len(rows)))
    if kind == "shuffled":
        at = draw(st.integers(0, len(rows) - 1))
        deltas[at] = draw(st.sampled_from([deltas[at] + 1, deltas[at] - 1, 0, 2**31, -(2**63)]))
    section = b"".join(_record(d, k, v, h, ts) for d, (k, v, h, ts) in zip(deltas, rows))
    if kind == "damaged":
        damaged = bytearray(section)
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(0, len(damaged) - 1))
            damaged[at] = draw(st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFF, damaged[at] ^ 1]))
        if draw(st.booleans()):
            damaged = damaged[: draw(st.integers(0, len(damaged)))] + draw(st.binary(max_size=3))
        section = bytes(damaged)
    count = len(rows) if draw(st.integers(0, 4)) else draw(st.sampled_from([1, len(rows) - 1, len(rows) + 1]))
    return section, max(count, 1)


@st.composite
def produced(draw):
    """The records a Produce carries for one partition, and the buffer type they arrive in:
    bytes, or a view into the middle of a larger receive buffer (as the broker hands them on)."""
    section, count = draw(sections())
    codec = draw(st.sampled_from([CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP]))
    batch = raw_batch(section, count, count - 1, codec)
    if draw(st.booleans()):
        batch = memoryview(bytearray(b"\x00" * 5 + batch + b"\x07" * 3))[5:5 + len(batch)]
    return batch


SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(records=produced(), compacted=st.booleans())
def test_validate_produce_is_the_same_with_the_compiled_walk(records, compacted):
    with pytest.MonkeyPatch.context() as monkeypatch:
        compiled, reference = _both(monkeypatch, records, COMPACTED if compacted else PLAIN)
    assert compiled == reference


@SETTINGS
@given(section=sections(), compacted=st.booleans(), data=st.data())
def test_the_compiled_walk_passes_only_what_the_reference_passes(section, compacted, data):
    """Directly on a section, around which other bytes may lie: True means the reference walk
    raises nothing; None leaves it to the reference; nothing else comes back."""
    section, count = section
    before = data.draw(st.sampled_from([b"", b"\x00" * 3]))
    after = data.draw(st.sampled_from([b"", b"\x02\x00"]))
    buf = before + section + after
    found = _speedups.produce_records_valid(buf, len(before), len(before) + len(section), count, compacted)
    assert found is None or found is True
    if found:
        batch = raw_batch(section, count, count - 1)
        assert _outcome(batch, COMPACTED if compacted else PLAIN)[0] == "returned"
        with pytest.MonkeyPatch.context() as m:
            m.setattr(validator, "produce_records_valid", produce_records_valid_py)
            assert _outcome(batch, COMPACTED if compacted else PLAIN)[0] == "returned"


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.binary(max_size=12), values,
                               st.lists(st.tuples(st.sampled_from(["", "h", "trace-id"]), header_values), max_size=3),
                               st.integers(0, 2**40)), min_size=1, max_size=30),
       codec=st.sampled_from(list(CompressionType)), compacted=st.booleans())
def test_the_compiled_walk_passes_what_clients_send(rows, codec, compacted):
    """Keyed records with ASCII header keys, any codec: decided in C, not left to the reference."""
    batch = build_batch(rows, compression=codec)
    header, buf, start, end = records_section(batch)
    assert _produce_records_valid_compiled(buf, start, end, header.records_count, compacted) is True
    view = memoryview(bytearray(batch))
    header, buf, start, end = records_section(view)
    assert _produce_records_valid_compiled(buf, start, end, header.records_count, compacted) is True
    validate_produce(view, COMPACTED if compacted else PLAIN, topic="t", partition=0, internal=False)


def test_the_validator_uses_the_compiled_walk():
    from tidemark.records import batch as records_batch

    assert validator.produce_records_valid is records_batch.produce_records_valid
    if records_batch.COMPILED:
        assert validator.produce_records_valid is _produce_records_valid_compiled


# Each error the walk reports, written by hand: the compiled walk declines it (None) and the
# validator gives the reference's exact error.
OK = _record(0, b"k", b"v", [])
CASES = {
    "an offset delta out of order": ([_record(0, b"k", b"v", []), _record(0, b"k", b"v", [])], 2, PLAIN,
                                     InvalidRecordError, "record 1 has offset delta 0, expected 1"),
    "a keyless record on a compacted topic": ([OK, _record(1, None, b"v", []), _record(2, None, None, [])], 3,
                                              COMPACTED, RecordValidationError, None),
    "a header key not in UTF-8": ([_record(0, b"k", b"v", [(b"\xff\xfe", b"x")])], 1, PLAIN, InvalidRecordError,
                                  "record 0 has a header key that is not UTF-8"),
    "a record past the batch": ([OK[:-1]], 1, PLAIN, InvalidRecordError, None),
    "bytes after the records": ([OK, b"\x00"], 1, PLAIN, InvalidRecordError, "1 bytes after the batch's 1 records"),
    "fewer records than the count": ([OK], 2, PLAIN, InvalidRecordError, "the batch ends after 1 of its 2 records"),
    "a record longer than its fields": ([_zigzag_bytes(9) + OK[1:] + b"\x00"], 1, PLAIN, InvalidRecordError,
                                        "record 0: fields take 8 bytes, its length says 9"),
    "a negative header count": ([_zigzag_bytes(7) + b"\x00\x00\x00\x02k\x02v\x01"], 1, PLAIN, InvalidRecordError,
                                "record 0 has -1 headers"),
    "a header without a key": ([_zigzag_bytes(9) + b"\x00\x00\x00\x02k\x02v\x02\x01\x00"], 1, PLAIN,
                               InvalidRecordError, "record 0 has a header without a key"),
    "a varint too long": ([_zigzag_bytes(16) + b"\x00" + b"\xff" * 15], 1, PLAIN, InvalidRecordError, None),
}


@pytest.mark.parametrize("case", CASES)
def test_each_walk_error_is_the_references(monkeypatch, case):
    parts, count, config, error, message = CASES[case]
    section = b"".join(parts)
    assert _speedups.produce_records_valid(section, 0, len(section), count, config.compact_enabled) is None
    compiled, reference = _both(monkeypatch, raw_batch(section, count, count - 1), config)
    assert compiled == reference
    assert compiled[:2] == ("raised", error)
    if message is not None:
        assert compiled[2] == message
    if error is RecordValidationError:  # Kafka's per-record errors: exactly the keyless ones
        assert [i for i, _ in compiled[3]] == [1, 2]


def test_a_header_key_in_utf8_but_not_ascii_passes_through_the_reference(monkeypatch):
    section = _record(0, b"k", b"v", [("caf\u00e9".encode(), b"x")])
    assert _speedups.produce_records_valid(section, 0, len(section), 1, False) is None
    compiled, reference = _both(monkeypatch, raw_batch(section, 1, 0), PLAIN)
    assert compiled == reference and compiled[0] == "returned"


@pytest.mark.parametrize("args", [
    ("not a buffer", 0, 1, 1, False),
    (b"\x00" * 8, -1, 8, 1, False),
    (b"\x00" * 8, 4, 2, 1, False),
    (b"\x00" * 8, 0, 9, 1, False),
    (b"\x00" * 8, 0, 8, 2**64, False),
    (b"\x00" * 8, 0, 8, 1, 1),  # compacted must be a bool
    (memoryview(b"\x00" * 16)[::2], 0, 8, 1, False),  # not contiguous
])
def test_unusual_arguments_are_left_to_the_reference(args):
    assert _speedups.produce_records_valid(*args) is None
