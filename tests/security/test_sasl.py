"""SASL_PLAINTEXT with SCRAM-SHA-256/512 and PLAIN, as Kafka serves it: real clients authenticate
and work; wrong passwords, unknown users, unsupported mechanisms, requests before
authentication and fuzzed tokens are refused with Kafka's errors, the broker unaffected."""

from __future__ import annotations

import shutil
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from scramp import ScramClient

from tests.security.clients import CLIENTS, confluent
from tests.security.conftest import PASSWORD, ListenersBroker, RawClient, add_user, stop
from tidemark.wire.client import encode_request_with_kio

API_VERSIONS, METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 3, 17, 36
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory):
    data_dir = tmp_path_factory.mktemp("sasl") / "data"
    add_user(data_dir, "alice", PASSWORD, "SCRAM-SHA-256", "SCRAM-SHA-512")
    broker = ListenersBroker(data_dir, {"PLAINTEXT": "PLAINTEXT", "CLIENTS": "SASL_PLAINTEXT"},
                             {"sasl.enabled.mechanisms": ",".join(MECHANISMS)}).start()
    yield broker
    stop(broker)


def _scram(client: RawClient, mechanism: str, user: str, password: str) -> tuple[object, object]:
    """Handshake, then both SCRAM rounds: the (server-first, final) SaslAuthenticate answers."""
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == ErrorCode.none
    scram = ScramClient([mechanism], user, password)
    first = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.get_client_first().encode()})
    if first.error_code != ErrorCode.none:
        return first, None
    scram.set_server_first(first.auth_bytes.decode())
    final = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.get_client_final().encode()})
    return first, final


def _metadata(client: RawClient):
    return client.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})


@pytest.mark.parametrize("name", list(CLIENTS))
def test_each_client_produces_consumes_in_a_group_and_commits_over_scram_sha_512(sasl_broker, name):
    if name == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (make system-deps)")
    security = {"protocol": "SASL_PLAINTEXT", "mechanism": "SCRAM-SHA-512", "username": "alice", "password": PASSWORD}
    values, committed = CLIENTS[name](sasl_broker.address("CLIENTS"), security, f"sasl-{name}", f"group-{name}")
    assert values == [b"m0", b"m1", b"m2"]
    assert committed == 3


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_scram_sha_256_and_plain_authenticate_the_same_user(sasl_broker, mechanism):
    security = {"protocol": "SASL_PLAINTEXT", "mechanism": mechanism, "username": "alice", "password": PASSWORD}
    values, committed = confluent(sasl_broker.address("CLIENTS"), security, f"t-{mechanism}", f"g-{mechanism}")
    assert (values, committed) == ([b"m0", b"m1", b"m2"], 3)


def test_a_wrong_password_is_refused_and_the_connection_closed_with_nothing_else_processed(sasl_broker):
    client = RawClient(sasl_broker.address("CLIENTS"))
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"}).error_code == ErrorCode.none
    scram = ScramClient(["SCRAM-SHA-512"], "alice", "not-the-password")
    first = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.get_client_first().encode()})
    scram.set_server_first(first.auth_bytes.decode())
    # The final message and a Metadata pipelined behind it: only the refusal is answered.
    client.send(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.get_client_final().encode()})
    client.send(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
    refused = client.receive(SASL_AUTHENTICATE, 2)
    assert refused.error_code == ErrorCode.sasl_authentication_failed
    assert refused.error_message == ("Authentication failed during authentication due to invalid credentials "
                                     "with SASL mechanism SCRAM-SHA-512")
    assert client.closed_by_broker()
    client.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_an_unknown_user_is_refused(sasl_broker, mechanism):
    client = RawClient(sasl_broker.address("CLIENTS"))
    first, _ = _scram(client, mechanism, "nobody", PASSWORD)
    assert first.error_code == ErrorCode.sasl_authentication_failed
    assert first.error_message.endswith(f"SASL mechanism {mechanism}")
    assert client.closed_by_broker()
    client.close()


def test_plain_with_a_wrong_password_is_refused(sasl_broker):
    client = RawClient(sasl_broker.address("CLIENTS"))
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
    refused = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0wrong"})
    assert (refused.error_code, refused.error_message) == (ErrorCode.sasl_authentication_failed,
                                                           "Authentication failed: Invalid username or password")
    assert client.closed_by_broker()


def test_an_unsupported_mechanism_is_answered_with_the_enabled_ones_then_closed(sasl_broker):
    client = RawClient(sasl_broker.address("CLIENTS"))
    answer = client.request(SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
    assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
    assert list(answer.mechanisms) == MECHANISMS
    assert client.closed_by_broker()


def test_before_authentication_only_api_versions_and_the_handshake_are_served(sasl_broker):
    client = RawClient(sasl_broker.address("CLIENTS"))
    versions = client.request(API_VERSIONS, 3, {"client_software_name": "raw", "client_software_version": "1"})
    keys = {api.api_key for api in versions.api_keys}
    assert {SASL_HANDSHAKE, SASL_AUTHENTICATE, 50, 51} <= keys
    client.send(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
    assert client.closed_by_broker()  # unanswered, as Kafka closes it
    client.close()
    client = RawClient(sasl_broker.address("CLIENTS"))
    client.send(SASL_AUTHENTICATE, 2, {"auth_bytes": b"n,,n=alice,r=abc"})  # no handshake first
    assert client.closed_by_broker()


def test_after_authentication_requests_are_served_and_a_second_handshake_is_illegal(sasl_broker):
    client = RawClient(sasl_broker.address("CLIENTS"))
    _, final = _scram(client, "SCRAM-SHA-512", "alice", PASSWORD)
    assert final.error_code == ErrorCode.none
    assert final.session_lifetime.total_seconds() == 0  # no re-authentication (connections.max.reauth.ms=0)
    # Re-authentication is refused cleanly: ILLEGAL_SASL_STATE, the connection kept.
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"}).error_code == ErrorCode.illegal_sasl_state
    brokers = _metadata(client).brokers
    assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", sasl_broker.ports["CLIENTS"])]


def test_the_plaintext_listener_needs_no_handshake_and_refuses_one(sasl_broker):
    client = RawClient(sasl_broker.address("PLAINTEXT"))
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.illegal_sasl_state
    brokers = _metadata(client).brokers
    assert [(b.host, b.port) for b in brokers] == [("127.0.0.1", sasl_broker.ports["PLAINTEXT"])]


def test_a_v0_handshake_takes_bare_tokens(sasl_broker):
    client = RawClient(sasl_broker.address("CLIENTS"))
    assert client.request(SASL_HANDSHAKE, 0, {"mechanism": "SCRAM-SHA-512"}).error_code == ErrorCode.none
    scram = ScramClient(["SCRAM-SHA-512"], "alice", PASSWORD)
    client.send_raw(scram.get_client_first().encode())
    scram.set_server_first(client.receive_frame().decode())
    # The final token and a Metadata request behind it, in one write: the request is served.
    token = scram.get_client_final().encode()
    request = encode_request_with_kio(METADATA, 12, 99, {"topics": None, "allow_auto_topic_creation": False,
                                                         "include_topic_authorized_operations": False})
    client.sock.sendall(struct.pack(">i", len(token)) + token + struct.pack(">i", len(request)) + request)
    client.correlation = 99
    scram.set_server_final(client.receive_frame().decode())  # checks the server's signature
    assert client.receive(METADATA, 12).brokers[0].port == sasl_broker.ports["CLIENTS"]


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(mechanism=st.sampled_from(MECHANISMS), tokens=st.lists(st.binary(max_size=200), min_size=1, max_size=3))
def test_fuzzed_tokens_are_refused_and_the_broker_is_unaffected(sasl_broker, mechanism, tokens):
    client = RawClient(sasl_broker.address("CLIENTS"))
    try:
        assert client.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == ErrorCode.none
        for token in tokens:
            client.send(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            frame = client.receive_frame()
            if frame is None:
                break
    finally:
        client.close()
    # Whatever that did, a real client still authenticates.
    fresh = RawClient(sasl_broker.address("CLIENTS"))
    assert _scram(fresh, "SCRAM-SHA-512", "alice", PASSWORD)[1].error_code == ErrorCode.none
    fresh.close()


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(frame=st.binary(max_size=300))
def test_fuzzed_frames_before_the_handshake_close_only_that_connection(sasl_broker, frame):
    client = RawClient(sasl_broker.address("CLIENTS"))
    client.send_raw(frame)
    client.sock.shutdown(1)
    while client.receive_frame() is not None:  # an ApiVersions answer at most, then the close
        pass
    client.close()
    fresh = RawClient(sasl_broker.address("PLAINTEXT"))
    assert _metadata(fresh).brokers
    fresh.close()
