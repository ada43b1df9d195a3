"""The client side of inter-broker security: how this broker's replica fetchers and forwarded
requests reach other brokers on inter.broker.listener.name (TLS, then SASL when that listener's
protocol says so), with the credentials of sasl.mechanism.inter.broker.protocol
(tidemark.inter.broker.sasl.username / .password; Kafka takes them from a JAAS login module)."""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from scramp import ScramClient

from tidemark.broker.security import listeners as security_listeners

if TYPE_CHECKING:
    from tidemark.broker.config import BrokerConfig

Opener = Callable[[str, int, float], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
_SIZE = struct.Struct(">i")


class InterBrokerAuthenticationError(ConnectionError):
    pass


def opener(config: BrokerConfig) -> Opener | None:
    """How to open an authenticated connection to another broker; None: plain TCP."""
    if not config["listeners"]:
        return None
    name = security_listeners.inter_broker_listener_name(config)
    protocol = config["listener.security.protocol.map"].get(name, "PLAINTEXT")
    if protocol == "PLAINTEXT":
        return None
    context = client_context(config, name) if protocol in security_listeners.TLS_PROTOCOLS else None
    mechanism = config["sasl.mechanism.inter.broker.protocol"]
    user, password = config["tidemark.inter.broker.sasl.username"], config["tidemark.inter.broker.sasl.password"]
    sasl = protocol in security_listeners.SASL_PROTOCOLS

    async def open_connection(host: str, port: int, timeout_s: float) -> tuple[asyncio.StreamReader,
                                                                               asyncio.StreamWriter]:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context, server_hostname=host if context else None), timeout_s)
        if sasl:
            try:
                await asyncio.wait_for(authenticate(reader, writer, mechanism, user, password), timeout_s)
            except BaseException:
                writer.close()
                raise
        return reader, writer

    return open_connection


def check(config: BrokerConfig, protocol: str) -> None:
    """A SASL inter-broker listener needs this broker's own credentials (ValueError)."""
    if protocol in security_listeners.SASL_PROTOCOLS and not (
            config["tidemark.inter.broker.sasl.username"] and config["tidemark.inter.broker.sasl.password"]):
        raise ValueError(f"an inter-broker listener of protocol {protocol} needs tidemark.inter.broker.sasl.username "
                         "and tidemark.inter.broker.sasl.password")


def client_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """Trust the listener's truststore (else the system's), and present this broker's own
    certificate, as Kafka's brokers do towards each other."""
    from tidemark.broker.config import listener_value
    from tidemark.broker.security.tls import load_keystore

    trust_file = listener_value(config, listener, "ssl.truststore.location")
    trust_pem = listener_value(config, listener, "ssl.truststore.certificates")
    context = ssl.create_default_context(cafile=trust_file, cadata=None if trust_file else trust_pem)
    load_keystore(context, lambda key: listener_value(config, listener, key))
    return context


async def authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mechanism: str,
                       user: str, password: str) -> None:
    from tidemark.wire.client import decode_response, encode_request

    correlation = 0

    async def call(api_key: int, version: int, body: dict) -> object:
        nonlocal correlation
        correlation += 1
        payload = encode_request(api_key, version, correlation, body, "tidemark-inter-broker")
        writer.write(_SIZE.pack(len(payload)) + payload)
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        return decode_response(api_key, version, await reader.readexactly(size))[1]

    handshake = await call(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    if handshake.error_code:
        raise InterBrokerAuthenticationError(f"SaslHandshake {mechanism}: error {int(handshake.error_code)}")

    async def token(data: bytes) -> bytes:
        answer = await call(SASL_AUTHENTICATE, 2, {"auth_bytes": data})
        if answer.error_code:
            raise InterBrokerAuthenticationError(answer.error_message or f"error {int(answer.error_code)}")
        return answer.auth_bytes

    if mechanism == "PLAIN":
        await token(b"\0" + user.encode() + b"\0" + password.encode())
        return
    scram = ScramClient([mechanism], user, password)
    scram.set_server_first((await token(scram.get_client_first().encode())).decode())
    scram.set_server_final((await token(scram.get_client_final().encode())).decode())
