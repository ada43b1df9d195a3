"""The per-API failure shapes encode at every version the broker serves."""

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from tidemark.broker.server import supported_versions
from tidemark.wire import error_responses
from tidemark.wire.build import build
from tidemark.wire.codec import Request, encode_response

JOIN_GROUP = 11
JOIN_GROUP_VERSIONS = range(supported_versions()[JOIN_GROUP][0], supported_versions()[JOIN_GROUP][1] + 1)


@pytest.mark.parametrize("version", JOIN_GROUP_VERSIONS)
def test_join_group_failure_encodes_at_every_version(version):
    """v0-6 have a non-nullable protocol name: "" there, Kafka's null from v7."""
    schema = load_response_schema(JOIN_GROUP, version)
    body = build(schema, error_responses.join_group(version, ErrorCode.coordinator_load_in_progress, "m-1"))
    frame = encode_response(Request(JOIN_GROUP, version, 3, None, None, False), body)
    header, offset = entity_reader(schema.__header_schema__)(frame, 4)
    decoded, _ = entity_reader(schema)(frame, 4 + offset)
    assert (decoded.error_code, decoded.member_id, decoded.generation_id) == (
        ErrorCode.coordinator_load_in_progress, "m-1", -1)
    assert decoded.protocol_name == ("" if version < 7 else None)
