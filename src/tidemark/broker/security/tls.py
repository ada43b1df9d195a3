"""A TLS listener's server context from Kafka's PEM settings (ssl.keystore.type=PEM).

The key and chain come from ssl.keystore.location (one PEM file holding both) or inline from
ssl.keystore.certificate.chain and ssl.keystore.key; the CAs client certificates are checked
against from ssl.truststore.location or inline ssl.truststore.certificates. ssl.client.auth:
none (no certificate asked), requested (asked, checked when given), required (the handshake
fails without one). The principal of a client that presented a certificate is its subject's
distinguished name, as Kafka's default principal builder names it (RFC 2253 order).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tidemark.broker.config import BrokerConfig

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The named listener's context (its listener.name.<name>.ssl.* overrides, else the broker's
    ssl.*). Raises ValueError naming the setting when the material is missing or unreadable."""
    from tidemark.broker.config import listener_value

    def setting(key: str) -> Any:
        return listener_value(config, listener, key)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # Kafka's ssl.enabled.protocols: TLSv1.2,TLSv1.3
    load_keystore(context, setting)
    client_auth = setting("ssl.client.auth")
    context.verify_mode = CLIENT_AUTH[client_auth]
    trust_file, trust_pem = setting("ssl.truststore.location"), setting("ssl.truststore.certificates")
    try:
        if trust_file:
            context.load_verify_locations(cafile=trust_file)
        elif trust_pem:
            context.load_verify_locations(cadata=trust_pem)
        elif context.verify_mode != ssl.CERT_NONE:
            raise ValueError(f"ssl.client.auth={client_auth} (listener {listener}) needs ssl.truststore.location "
                             "or ssl.truststore.certificates")
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the truststore: {exc}") from None
    return context


def load_keystore(context: ssl.SSLContext, setting: Callable[[str], Any]) -> None:
    """This broker's key and chain into `context` (a listener's, or its inter-broker client's)."""
    password = setting("ssl.key.password")
    location = setting("ssl.keystore.location")
    chain, key = setting("ssl.keystore.certificate.chain"), setting("ssl.keystore.key")
    try:
        if location:
            context.load_cert_chain(location, password=password)
        elif chain and key:
            _load_inline(context, chain, key, password)
        else:
            raise ValueError("a TLS listener needs ssl.keystore.location, or ssl.keystore.certificate.chain "
                             "and ssl.keystore.key (PEM)")
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot load the broker's key and certificate: {exc}") from None


def _load_inline(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """Python's ssl loads a key only from a file: a private one, removed at once."""
    fd, path = tempfile.mkstemp(prefix="tidemark-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as out:  # mkstemp: mode 0600
            out.write(_pem(key) + "\n" + _pem(chain) + "\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def _pem(text: str) -> str:
    """Inline PEM given on one line (a properties file) keeps its line breaks as \\n."""
    return text.replace("\\n", "\n").strip()


def certificate_principal(peercert: dict[str, Any] | None) -> str | None:
    """User:<distinguished name> of a verified client certificate, or None without one."""
    if not peercert or not peercert.get("subject"):
        return None
    names = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
             "localityName": "L", "stateOrProvinceName": "ST", "streetAddress": "STREET",
             "domainComponent": "DC", "userId": "UID"}
    rdns = []
    for rdn in reversed(peercert["subject"]):  # RFC 2253: the most specific first
        rdns.append("+".join(f"{names.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + ",".join(rdns)


def _escape(value: str) -> str:
    escaped = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if escaped.startswith((" ", "#")):
        escaped = "\\" + escaped
    if escaped.endswith(" ") and not escaped.endswith("\\ "):
        escaped = escaped[:-1] + "\\ "
    return escaped
