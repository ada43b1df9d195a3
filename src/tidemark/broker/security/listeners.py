"""Kafka's listener settings: `listeners`, `advertised.listeners`, `listener.security.protocol.map`.

A listener is NAME://host:port; its security protocol is the map's entry for NAME (the default
map names each protocol after itself, so PLAINTEXT://, SSL://, SASL_PLAINTEXT:// and SASL_SSL://
need no entry). Clients are told the advertised address of the listener their request came in
on, as Kafka does, so a broker can sit behind a proxy on one listener and be reached directly
on another.
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tidemark.broker.config import BrokerConfig

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in PROTOCOLS)
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")


@dataclasses.dataclass(frozen=True)
class Endpoint:
    name: str  # the listener name (upper case, as Kafka normalises it)
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


@dataclasses.dataclass(frozen=True)
class Listener:
    """One listener as the broker runs it: where it binds, what it advertises, its protocol."""

    name: str
    protocol: str
    host: str  # bind address ("" in the setting: every interface)
    port: int  # 0: any free port, known once bound
    advertised: Endpoint | None  # None: the bound address

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @property
    def tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS


def parse_endpoints(text: str, setting: str, *, allow_any_port: bool) -> list[Endpoint]:
    """`NAME://host:port,...`; names unique (ValueError names the setting's problem)."""
    endpoints: list[Endpoint] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, sep, address = entry.partition("://")
        host, colon, port = address.rpartition(":")
        low = 0 if allow_any_port else 1
        if not sep or not name.strip() or not colon or not port.isdigit() or not low <= int(port) <= 65535:
            raise ValueError(f"expected NAME://host:port entries with a port from {low} to 65535, got {entry!r}")
        name = name.strip().upper()
        if any(e.name == name for e in endpoints):
            raise ValueError(f"each listener must have a different name, {name} appears twice")
        endpoints.append(Endpoint(name, host.strip().strip("[]"), int(port)))
    return endpoints


def parse_protocol_map(text: str) -> dict[str, str]:
    """`NAME:PROTOCOL,...` (listener.security.protocol.map)."""
    mapping: dict[str, str] = {}
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        name, sep, protocol = entry.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not name.strip() or protocol not in PROTOCOLS:
            raise ValueError(f"expected NAME:PROTOCOL entries, PROTOCOL one of {', '.join(PROTOCOLS)}; got {entry!r}")
        mapping[name.strip().upper()] = protocol
    return mapping


def check_listeners(text: str) -> str | None:
    return text.strip() if parse_endpoints(text, "listeners", allow_any_port=True) else None


def check_advertised_listeners(text: str) -> str | None:
    endpoints = parse_endpoints(text, "advertised.listeners", allow_any_port=False)
    if any(e.host == "0.0.0.0" for e in endpoints):
        raise ValueError("advertised.listeners cannot use the nonroutable meta-address 0.0.0.0")
    return text.strip() if endpoints else None


def check_protocol_map(text: str) -> dict[str, str]:
    mapping = parse_protocol_map(text)
    if not mapping:
        raise ValueError("expected at least one NAME:PROTOCOL entry")
    return mapping


def resolve(config: BrokerConfig, host: str = "127.0.0.1", port: int = 9092) -> list[Listener]:
    """The broker's listeners: `listeners` when set, else one PLAINTEXT listener on host:port
    (`serve --listen`). Raises ValueError for settings that disagree with each other."""
    protocol_map: Mapping[str, str] = config["listener.security.protocol.map"]
    text = config["listeners"]
    bound = parse_endpoints(text, "listeners", allow_any_port=True) if text else [Endpoint("PLAINTEXT", host, port)]
    advertised = {e.name: e for e in parse_endpoints(config["advertised.listeners"] or "", "advertised.listeners",
                                                     allow_any_port=False)}
    for name in advertised:
        if not any(e.name == name for e in bound):
            raise ValueError(f"advertised.listeners names {name}, which is not in listeners")
    listeners = []
    for endpoint in bound:
        protocol = protocol_map.get(endpoint.name)
        if protocol is None:
            raise ValueError(f"listener {endpoint.name} has no entry in listener.security.protocol.map")
        ad = advertised.get(endpoint.name)
        if ad is not None and not ad.host:
            ad = dataclasses.replace(ad, host=socket.getfqdn())  # Kafka: empty host, this machine's name
        listeners.append(Listener(endpoint.name, protocol, endpoint.host, endpoint.port, ad))
    inter = inter_broker_listener_name(config) if text else listeners[0].name
    by_name = {l.name: l for l in listeners}
    if inter not in by_name and config["zookeeper.connect"]:  # only a cluster's brokers talk to each other
        raise ValueError(f"inter.broker.listener.name must be a listener name defined in listeners, {inter} is not")
    if config["zookeeper.connect"]:
        from tidemark.broker.security import client

        client.check(config, by_name[inter].protocol)
    return listeners


def inter_broker_listener_name(config: BrokerConfig) -> str:
    """inter.broker.listener.name, else the listener named after security.inter.broker.protocol."""
    return config["inter.broker.listener.name"] or config["security.inter.broker.protocol"]
