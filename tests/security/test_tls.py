"""SSL and SASL_SSL listeners from Kafka's PEM settings: real clients over TLS with client
certificates and with SCRAM; a client without a certificate (or with one no trusted CA signed)
where one is required is refused in the handshake, the broker unaffected; the principal is the
certificate's subject."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl

import pytest
from kio.schema.errors import ErrorCode

from tests.security.clients import CLIENTS
from tests.security.conftest import PASSWORD, ListenersBroker, RawClient, add_user, stop
from tidemark.broker.config import BrokerConfig, ConfigError
from tidemark.broker.server import Broker
from tidemark.broker.security import tls
from tidemark.wire.api_keys import ApiKey


def tls_settings(certificates) -> dict[str, str]:
    """Inline PEM (ssl.keystore.certificate.chain, ssl.keystore.key, ssl.truststore.certificates);
    the SSL listener requires a client certificate, the SASL_SSL one does not."""
    return {"ssl.keystore.type": "PEM",
            "ssl.keystore.certificate.chain": certificates["broker.pem"].read_text(),
            "ssl.keystore.key": certificates["broker.key"].read_text(),
            "ssl.truststore.certificates": certificates["ca.pem"].read_text(),
            "listener.name.ssl.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512"}


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, certificates):
    data_dir = tmp_path_factory.mktemp("tls") / "data"
    add_user(data_dir, "alice", PASSWORD, "SCRAM-SHA-512")
    broker = ListenersBroker(data_dir, {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_SSL": "SASL_SSL"},
                             tls_settings(certificates)).start()
    yield broker
    stop(broker)


def _skip_without_kcat(name: str) -> None:
    if name == "kcat" and shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (make system-deps)")


@pytest.mark.parametrize("name", list(CLIENTS))
def test_each_client_works_over_sasl_ssl_with_scram_sha_512(tls_broker, certificates, name):
    _skip_without_kcat(name)
    security = {"protocol": "SASL_SSL", "mechanism": "SCRAM-SHA-512", "username": "alice", "password": PASSWORD,
                "ca": certificates["ca.pem"]}
    values, committed = CLIENTS[name](tls_broker.address("SASL_SSL"), security, f"sasl-ssl-{name}", f"gs-{name}")
    assert (values, committed) == ([b"m0", b"m1", b"m2"], 3)


@pytest.mark.parametrize("name", list(CLIENTS))
def test_each_client_works_over_ssl_with_a_client_certificate(tls_broker, certificates, name):
    _skip_without_kcat(name)
    security = {"protocol": "SSL", "ca": certificates["ca.pem"], "cert": certificates["alice.pem"],
                "key": certificates["alice.key"]}
    values, committed = CLIENTS[name](tls_broker.address("SSL"), security, f"ssl-{name}", f"gc-{name}")
    assert (values, committed) == ([b"m0", b"m1", b"m2"], 3)


def _handshake(address: str, certificates, client: str | None) -> None:
    context = ssl.create_default_context(cafile=str(certificates["ca.pem"]))
    if client is not None:
        context.load_cert_chain(str(certificates[f"{client}.pem"]), str(certificates[f"{client}.key"]))
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as wrapped:
            # TLS 1.3: the server's verdict on the client certificate arrives with the first read
            wrapped.sendall(b"\x00\x00\x00\x00")
            if wrapped.recv(1) == b"":
                raise ConnectionResetError("closed")


@pytest.mark.parametrize("client", [None, "mallory"])
def test_a_client_without_a_trusted_certificate_is_refused_where_one_is_required(tls_broker, certificates, client):
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        _handshake(tls_broker.address("SSL"), certificates, client)
    # The broker goes on serving: alice's certificate is accepted on the same listener.
    security = {"protocol": "SSL", "ca": certificates["ca.pem"], "cert": certificates["alice.pem"],
                "key": certificates["alice.key"]}
    values, committed = CLIENTS["confluent-kafka"](tls_broker.address("SSL"), security, f"after-{client}", f"ga-{client}")
    assert committed == 3


def test_a_plaintext_client_on_the_tls_listener_is_closed_and_the_broker_unaffected(tls_broker):
    client = RawClient(tls_broker.address("SASL_SSL"))
    client.send(18, 0, {})
    assert client.closed_by_broker()
    plain = RawClient(tls_broker.address("PLAINTEXT"))
    assert plain.request(ApiKey.METADATA, 1, {"topics": None}).brokers[0].port == tls_broker.ports["PLAINTEXT"]


def test_missing_or_unreadable_pem_material_is_refused_at_start(tmp_path, certificates):
    listeners = {"listeners": "SSL://127.0.0.1:0"}
    with pytest.raises(ConfigError, match="ssl.keystore.location, or ssl.keystore.certificate.chain"):
        Broker(BrokerConfig(listeners), tmp_path)
    keystore = tmp_path / "keystore.pem"  # ssl.keystore.location: the key and the chain in one PEM file
    keystore.write_text(certificates["broker.key"].read_text() + certificates["broker.pem"].read_text())
    with pytest.raises(ConfigError, match="needs ssl.truststore"):
        Broker(BrokerConfig({**listeners, "ssl.keystore.location": str(keystore), "ssl.client.auth": "required"}),
               tmp_path)
    assert Broker(BrokerConfig({**listeners, "ssl.keystore.location": str(keystore)}), tmp_path).listeners[0].tls
    with pytest.raises(ConfigError, match="cannot load the broker's key"):
        Broker(BrokerConfig({**listeners, "ssl.keystore.location": str(tmp_path / "missing.pem")}), tmp_path)
    with pytest.raises(ConfigError, match="JKS and PKCS12"):
        BrokerConfig({"ssl.keystore.type": "JKS"})


def test_the_principal_is_the_certificate_subject_and_anonymous_without_one(tmp_path, certificates):
    """In process: the connection's RequestContext carries User:<subject DN> (RFC 2253 order),
    for the authorizer; a TLS client without a certificate (requested, not required) is ANONYMOUS."""
    settings = {**tls_settings(certificates), "listeners": "SSL://127.0.0.1:0",
                "listener.name.ssl.ssl.client.auth": "requested"}

    async def run() -> list[str]:
        broker = Broker(BrokerConfig(settings), tmp_path / "data")
        await broker.start()
        try:
            principals = []
            for client in ("alice", None):
                context = ssl.create_default_context(cafile=str(certificates["ca.pem"]))
                if client:
                    context.load_cert_chain(str(certificates["alice.pem"]), str(certificates["alice.key"]))
                reader, writer = await asyncio.open_connection("127.0.0.1", broker.port, ssl=context,
                                                               server_hostname="localhost")
                while not broker.connections:
                    await asyncio.sleep(0.01)
                (connection,) = broker.connections
                principals.append(connection._context.principal)
                writer.close()
                await writer.wait_closed()
                while broker.connections:
                    await asyncio.sleep(0.01)
            return principals
        finally:
            await broker.stop()

    assert asyncio.run(asyncio.wait_for(run(), 60)) == ["User:CN=alice,OU=eng,O=tidemark,C=NO", "User:ANONYMOUS"]


def test_distinguished_names_escape_as_rfc_2253_does():
    subject = ((("countryName", "NO"),), (("organizationName", "a,b"),), (("commonName", "x=y"),))
    assert tls.certificate_principal({"subject": subject}) == "User:CN=x\\=y,O=a\\,b,C=NO"
    assert tls.certificate_principal(None) is None
    assert ErrorCode.sasl_authentication_failed == 58
