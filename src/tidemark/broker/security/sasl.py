"""The SASL server side of one connection (Kafka's SaslServerAuthenticator, as clients see it).

Until authentication completes only ApiVersions, SaslHandshake and SaslAuthenticate are
served; anything else closes the connection unanswered, as Kafka does. SaslHandshake names a
mechanism (UNSUPPORTED_SASL_MECHANISM with the enabled list, then the connection closes); the
tokens follow in SaslAuthenticate requests (handshake v1) or, after a v0 handshake, as bare
length-prefixed frames (Kafka before 1.0). A failure answers SASL_AUTHENTICATION_FAILED and the
connection closes after connection.failed.authentication.delay.ms, nothing else it sent being
processed. Re-authentication (KIP-368) is not served: connections.max.reauth.ms stays 0, the
session lifetime answered is 0, and a SaslHandshake on an authenticated connection is refused
with ILLEGAL_SASL_STATE, the connection kept.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from kio.schema.errors import ErrorCode
from scramp import ScramMechanism

from tidemark import metrics
from tidemark.broker.security.scram_store import SCRAM_MECHANISMS, ScramCredential, check_password
from tidemark.wire.build import build
from tidemark.wire.codec import Request, encode_response, response_schema

log = structlog.get_logger("tidemark.security")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
ANONYMOUS = "User:ANONYMOUS"
MAX_RECEIVE_SIZE = 524288  # Kafka's sasl.server.max.receive.size: frames before authentication
PLAIN_FAILED = "Authentication failed: Invalid username or password"

Lookup = Callable[[str], Awaitable[dict[str, ScramCredential]]]


class State(enum.Enum):
    HANDSHAKE = "handshake"  # ApiVersions or SaslHandshake expected
    AUTHENTICATE = "authenticate"  # tokens expected
    COMPLETE = "complete"
    FAILED = "failed"  # answered, closing


class AuthenticationFailed(Exception):
    pass


class RawToken:
    """A SASL token sent as a bare frame after a v0 handshake."""

    api_key = -1

    def __init__(self, token: bytes) -> None:
        self.token = token


def encode(request: Request, body: dict[str, Any]) -> bytes:
    return encode_response(request, build(response_schema(request.api_key, request.api_version), body))


def failed_message(mechanism: str) -> str:
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class SaslAuthenticator:
    def __init__(self, enabled: tuple[str, ...], lookup: Lookup) -> None:
        self.enabled = enabled
        self.lookup = lookup
        self.state = State.HANDSHAKE
        self.mechanism: str | None = None
        self.raw_tokens = False  # a v0 handshake: tokens come as bare frames
        self.principal = ANONYMOUS
        self._scram: Any = None  # scramp's server, between the two SCRAM rounds

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    def allowed(self, api_key: int) -> bool:
        """May this request be served before authentication completes?"""
        if self.state is State.HANDSHAKE:
            return api_key in (API_VERSIONS, SASL_HANDSHAKE)
        return api_key == SASL_AUTHENTICATE and not self.raw_tokens or api_key == RawToken.api_key and self.raw_tokens

    async def step(self, request: Request | RawToken) -> bytes:
        """Answer one handshake or token request: the frame to write (the state tells whether
        the connection goes on, is authenticated, or is to be closed)."""
        if isinstance(request, RawToken):
            try:
                reply = await self._token(request.token)
            except AuthenticationFailed as exc:
                self._fail(str(exc))
                return b""  # Kafka before 1.0 had no way to say why: the connection just closes
            return len(reply).to_bytes(4, "big") + reply
        if request.api_key == SASL_HANDSHAKE:
            return encode(request, self._handshake(request))
        try:
            reply = await self._token(request.body.auth_bytes)
        except AuthenticationFailed as exc:
            self._fail(str(exc))
            return encode(request, {"error_code": ErrorCode.sasl_authentication_failed, "error_message": str(exc),
                                    "auth_bytes": b""})
        return encode(request, {"error_code": 0, "error_message": None, "auth_bytes": reply})

    def _handshake(self, request: Request) -> dict[str, Any]:
        mechanism = request.body.mechanism
        if mechanism not in self.enabled:
            self.state = State.FAILED
            metrics_failed("unsupported_mechanism")
            log.info("sasl_unsupported_mechanism", mechanism=mechanism)
            return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": list(self.enabled)}
        self.mechanism = mechanism
        self.raw_tokens = request.api_version == 0
        self.state = State.AUTHENTICATE
        return {"error_code": 0, "mechanisms": list(self.enabled)}

    async def _token(self, token: bytes) -> bytes:
        if self.mechanism == "PLAIN":
            return await self._plain(token)
        return await self._scram_token(token)

    async def _plain(self, token: bytes) -> bytes:
        """RFC 4616: authzid NUL authcid NUL password, checked against the user's SCRAM
        credential (the password derived again with its salt and iterations)."""
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed(PLAIN_FAILED) from None
        if not user or not password:
            raise AuthenticationFailed("Authentication failed: username or password not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is "
                                       "different from username")
        credentials = await self.lookup(user)
        for mechanism in reversed(SCRAM_MECHANISMS):  # the stronger first
            credential = credentials.get(mechanism)
            if credential is not None and await asyncio.to_thread(check_password, mechanism, credential, password):
                self._succeed(user)
                return b""
        raise AuthenticationFailed(PLAIN_FAILED)

    async def _scram_token(self, token: bytes) -> bytes:
        mechanism = self.mechanism
        assert mechanism is not None
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(failed_message(mechanism)) from None
        if self._scram is None:
            user = _scram_user(text)
            if user is None:
                raise AuthenticationFailed(failed_message(mechanism))
            credential = (await self.lookup(user)).get(mechanism)
            if credential is None:
                raise AuthenticationFailed(failed_message(mechanism))
            auth_info = (credential.salt, credential.stored_key, credential.server_key, credential.iterations)
            server = ScramMechanism(mechanism).make_server(lambda _name: auth_info)
            try:
                server.set_client_first(text)
                first = server.get_server_first()
            except Exception as exc:  # noqa: BLE001 - scramp refuses a malformed or unsupported message
                log.info("scram_client_first_refused", error=str(exc))
                raise AuthenticationFailed(failed_message(mechanism)) from None
            self._scram, self._scram_user = server, user
            return first.encode("utf-8")
        server, self._scram = self._scram, None
        try:
            _accept_librdkafka_nonce(server, text)
            server.set_client_final(text)
            final = server.get_server_final()
        except Exception as exc:  # noqa: BLE001 - a wrong proof (wrong password) or a malformed message
            log.info("scram_client_final_refused", error=str(exc))
            raise AuthenticationFailed(failed_message(mechanism)) from None
        self._succeed(self._scram_user)
        return final.encode("utf-8")

    def _succeed(self, user: str) -> None:
        self.state = State.COMPLETE
        self.principal = f"User:{user}"
        metrics.SASL_AUTHENTICATIONS.labels("success").inc()
        log.info("sasl_authenticated", principal=self.principal, mechanism=self.mechanism)

    def _fail(self, reason: str) -> None:
        self.state = State.FAILED
        metrics_failed("failed")
        log.info("sasl_authentication_failed", mechanism=self.mechanism, reason=reason)


def metrics_failed(outcome: str) -> None:
    metrics.SASL_AUTHENTICATIONS.labels(outcome).inc()


def _accept_librdkafka_nonce(server: Any, client_final: str) -> None:
    """librdkafka before 2.6.1 sends r=<client nonce><server-first nonce> in its client-final
    message (and signs that). Kafka 3.8.1 to 3.9 accept a nonce ending with the one they sent;
    so does tidemark, for exactly that form, so the kcat and librdkafka builds of Linux
    distributions authenticate. The proof is still checked, over the message as sent."""
    sent = str(server.nonce)
    for field in client_final.split(","):
        if field.startswith("r="):
            nonce = field[2:]
            client_nonce = next((f[2:] for f in server.client_first_bare.split(",") if f.startswith("r=")), None)
            if client_nonce and nonce == client_nonce + sent:
                server.nonce = type(server.nonce)(nonce)
            return


def _scram_user(client_first: str) -> str | None:
    """The user a SCRAM client-first message names (gs2 header, then n=saslname), unescaped."""
    parts = client_first.split(",")
    if len(parts) < 4 or not parts[2].startswith("n="):
        return None
    return parts[2][2:].replace("=2C", ",").replace("=3D", "=")


def refuse_after_authentication(request: Request) -> dict[str, Any]:
    """SaslHandshake or SaslAuthenticate on an authenticated (or PLAINTEXT/SSL) connection:
    ILLEGAL_SASL_STATE, as Kafka's request handler answers (re-authentication is not served)."""
    if request.api_key == SASL_HANDSHAKE:
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}
    return {"error_code": ErrorCode.illegal_sasl_state, "auth_bytes": b"",
            "error_message": "SaslAuthenticate request received after successful authentication"}
