"""Request decoding and response encoding with kio, sans-I/O.

``decode_request(frame, supported)`` turns one frame payload (as produced by
:class:`~tidemark.wire.framing.FrameDecoder`) into a :class:`Request`;
``encode_response(request, body)`` turns a response entity into a complete frame
(length prefix, response header, body).

Header versions: a request uses header v2 when its schema is flexible, else v1. A
response uses header v1 when flexible, else v0, except ApiVersions, whose response
always uses header v0 (KIP-511) so that a client can read it whatever version it sent.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import types
import typing
import uuid
from collections.abc import Callable
from collections.abc import Mapping
from dataclasses import dataclass

from kio.index import load_request_schema
from kio.index import load_response_schema
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.schema.index import schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.serial import entity_reader
from kio.serial import entity_writer
from kio.static.constants import EntityType

from . import error_responses, list_offsets_v0, offsets_v0, produce_request, produce_v0, request_guard
from .build import build
from .errors import MalformedRequest
from .list_offsets_v0 import ListOffsetsV0Response
from .api_keys import ApiKey

__all__ = (
    "CODEC_API_RANGES",
    "KIO_API_RANGES",
    "Request",
    "api_versions_fallback",
    "decode_request",
    "encode_response",
    "error_response",
    "kio_versions",
    "response_schema",
)


_HEAD = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: object | None
    unsupported: bool


def kio_versions(api_key: int) -> tuple[int, int] | None:
    """The (min, max) versions kio has both request and response schemas for."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = [
        v
        for v, kinds in schema_name_map.get(name, {}).items()
        if EntityType.request in kinds and EntityType.response in kinds
    ]
    if not versions:
        return None
    return min(versions), max(versions)


KIO_API_RANGES: dict[int, tuple[int, int]] = {
    key: rng for key in sorted(api_key_map) if (rng := kio_versions(key)) is not None
}
"""Every API kio covers, with the version range it has request and response schemas for."""

CODEC_API_RANGES: dict[int, tuple[int, int]] = dict(KIO_API_RANGES)
"""What this module can decode and encode: kio's ranges plus the hand-written ListOffsets v0 and
Produce v0-v2. (OffsetCommit v0-1 and OffsetFetch v0 are hand-written too, but only a broker with
a ZooKeeper offset store serves them: see HAND_WRITTEN_RANGES.)"""
CODEC_API_RANGES[ApiKey.LIST_OFFSETS] = (0, KIO_API_RANGES[ApiKey.LIST_OFFSETS][1])
CODEC_API_RANGES[ApiKey.PRODUCE] = (0, KIO_API_RANGES[ApiKey.PRODUCE][1])

# (api key, version) -> (request body reader, response class, response body writer) of the
# versions written by hand.
_HAND_CODECS: dict[tuple[int, int], tuple] = {**offsets_v0.CODECS, **produce_v0.CODECS}

HAND_WRITTEN_RANGES: dict[int, tuple[int, int]] = {
    ApiKey.OFFSET_COMMIT: (0, KIO_API_RANGES[ApiKey.OFFSET_COMMIT][1]),
    ApiKey.OFFSET_FETCH: (0, KIO_API_RANGES[ApiKey.OFFSET_FETCH][1]),
}
"""The ranges with the old versions this module writes by hand, for brokers that serve them."""


# --------------------------------------------------------------------------- decoding


def _peek_client_id(frame) -> str | None:
    """client_id is a nullable int16-length string at offset 8 in header v1 and v2."""
    try:
        (n,) = _I16.unpack_from(frame, 8)
        if n < 0 or 10 + n > len(frame):
            return None
        return bytes(frame[10 : 10 + n]).decode("utf-8", errors="replace")
    except struct.error:
        return None


_Decoder = Callable[[bytes], Request]
_DECODERS: dict[tuple[int, int], _Decoder | None] = {}


def _make_decoder(api_key: int, api_version: int) -> _Decoder | None:
    # Only the Produce v3+ reader keeps views of the frame; every other reader gets bytes (kio's
    # native readers refuse writable buffers).
    takes_views = api_key == ApiKey.PRODUCE and api_version >= produce_request.FIRST_VERSION
    if api_key == ApiKey.LIST_OFFSETS and api_version == 0:
        read_header = entity_reader(RequestHeaderV1)
        read_body = list_offsets_v0.read_request
    elif (api_key, api_version) in _HAND_CODECS:
        read_header = entity_reader(RequestHeaderV1)
        read_body = _HAND_CODECS[api_key, api_version][0]
    elif takes_views:
        # Records as views of the frame, not copies (kio's readers want read-only bytes: the
        # header gets a read-only view).
        try:
            read_kio_header = entity_reader(load_request_schema(api_key, api_version).__header_schema__)
        except Exception:
            return None
        read_body = produce_request.reader(api_version)

        def read_header(frame, offset: int):
            return read_kio_header(frame.toreadonly() if isinstance(frame, memoryview) else frame, offset)
    else:
        try:
            schema = load_request_schema(api_key, api_version)
        except Exception:
            return None
        read_header = entity_reader(schema.__header_schema__)
        read_body = entity_reader(schema)
        # kio would reserve memory by a claimed count or length first (request_guard says which
        # bodies are walked).
        if request_guard.needs_walk(api_key, schema):
            read_body = _guarded(schema, read_body)

    def decode(frame) -> Request:
        if not takes_views and type(frame) is memoryview:
            frame = bytes(frame)
        try:
            header, offset = read_header(frame, 0)
            body, size = read_body(frame, offset)
        except Exception as e:
            raise MalformedRequest(
                f"cannot decode api_key={api_key} v{api_version}: {type(e).__name__}: {e}"
            ) from e
        # Bytes after the body are ignored, as Kafka's parser does: librdkafka's AdminClient
        # sends Metadata v13 with three of them, and refusing would cut it off.
        return Request(
            api_key,
            api_version,
            header.correlation_id,
            header.client_id,
            body,
            False,
        )

    return decode


def _guarded(schema: type, read_body: Callable) -> Callable:
    def read(frame, offset: int):
        request_guard.check(schema, frame, offset)
        return read_body(frame, offset)
    return read


def decode_request(frame: bytes, supported: Mapping[int, tuple[int, int]]) -> Request:
    """Decode one frame payload (without its length prefix).

    Returns ``Request(unsupported=True, body=None)`` when the API key is not in
    ``supported``, or no codec exists for the version; ``unsupported=True`` with the decoded
    body (None if it does not decode) for a version of a supported key outside its range.
    Raises :class:`MalformedRequest` when the bytes of a supported version do not decode.
    """
    try:
        api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
    except struct.error:
        raise MalformedRequest(f"frame of {len(frame)} bytes is shorter than a request header") from None
    rng = supported.get(api_key)
    if rng is not None:
        key = (api_key, api_version)
        try:
            decoder = _DECODERS[key]
        except KeyError:
            decoder = _DECODERS[key] = _make_decoder(api_key, api_version)
        if decoder is not None:
            if rng[0] <= api_version <= rng[1]:
                return decoder(frame)
            # A version of a served API that we can read but do not serve: read it anyway, so
            # the UNSUPPORTED_VERSION answer names what it asked about; unreadable, it is still
            # answered, without the body.
            try:
                request = decoder(frame)
            except MalformedRequest:
                pass
            else:
                request.unsupported = True
                return request
    return Request(api_key, api_version, correlation_id, _peek_client_id(frame), None, True)


# --------------------------------------------------------------------------- encoding

_Encoder = Callable[[io.BytesIO, object], None]
# type(body) -> (header is flexible, body writer)
_ENCODERS: dict[type, tuple[bool, _Encoder]] = {}


def _list_offsets_v0_writer(buffer: io.BytesIO, body: object) -> None:
    buffer.write(list_offsets_v0.write_response(body))  # type: ignore[arg-type]


def _encoder_for(cls: type) -> tuple[bool, _Encoder]:
    try:
        return _ENCODERS[cls]
    except KeyError:
        pass
    if cls is ListOffsetsV0Response:
        enc = (False, _list_offsets_v0_writer)
    elif (key := (getattr(cls, "__api_key__", None), getattr(cls, "__version__", None))) in _HAND_CODECS:
        write = _HAND_CODECS[key][2]
        enc = (False, lambda buffer, body: buffer.write(write(body)))
    else:
        if getattr(cls, "__type__", None) is not EntityType.response:
            raise TypeError(f"{cls.__name__} is not a kio response entity")
        if cls.__api_key__ == ApiKey.API_VERSIONS:
            flexible_header = False  # KIP-511: always response header v0
        else:
            flexible_header = bool(cls.__header_schema__.__flexible__)
        enc = (flexible_header, entity_writer(cls))
    _ENCODERS[cls] = enc
    return enc


def encode_response(request: Request, body: object) -> bytes:
    """Encode ``body`` as the response to ``request``: length prefix + header + body."""
    cls = type(body)
    if cls.__api_key__ != request.api_key or cls.__version__ != request.api_version:  # type: ignore[attr-defined]
        raise ValueError(
            f"{cls.__name__} v{cls.__version__} does not answer "  # type: ignore[attr-defined]
            f"api_key={request.api_key} v{request.api_version}"
        )
    flexible_header, write_body = _encoder_for(cls)
    buffer = io.BytesIO()
    # Size placeholder, correlation id, and for header v1 an empty tagged-field section.
    buffer.write(_HEADER_V1_TEMPLATE if flexible_header else _HEADER_V0_TEMPLATE)
    if request.api_key == ApiKey.API_VERSIONS:
        # The broker answers every connection with the same ApiVersions body, and kio's
        # writer takes a few hundred microseconds for ~90 keys: keep the bytes.
        last = _API_VERSIONS_LAST
        if last[0] is body:  # the broker reuses one body object: skip even the hash
            encoded = last[1]
        else:
            encoded = _API_VERSIONS_CACHE.get(body)
        if encoded is None:
            tmp = io.BytesIO()
            write_body(tmp, body)
            encoded = tmp.getvalue()
            if len(_API_VERSIONS_CACHE) >= 32:
                _API_VERSIONS_CACHE.clear()
            _API_VERSIONS_CACHE[body] = encoded
        _API_VERSIONS_LAST[:] = (body, encoded)
        buffer.write(encoded)
    else:
        write_body(buffer, body)
    out = buffer.getbuffer()
    struct.pack_into(">ii", out, 0, len(out) - 4, request.correlation_id)
    del out
    return buffer.getvalue()


def encode_response_body(request: Request, body: bytes, *, flexible_header: bool) -> bytes:
    """Frame an already encoded response body: length prefix + response header + body."""
    header = _I32_PAIR.pack(len(body) + (5 if flexible_header else 4), request.correlation_id)
    return header + (b"\x00" if flexible_header else b"") + body


_I32_PAIR = struct.Struct(">ii")
_HEADER_V0_TEMPLATE = bytes(8)
_API_VERSIONS_CACHE: dict[object, bytes] = {}
_API_VERSIONS_LAST: list = [None, None]
_HEADER_V1_TEMPLATE = bytes(9)


def api_versions_fallback(request: Request, supported: Mapping[int, tuple[int, int]]) -> bytes:
    """KIP-511: the frame answering an ApiVersions request of an unsupported version.

    An ApiVersionsResponse v0 (header v0) with UNSUPPORTED_VERSION and every supported
    range, so the client retries with the highest version both sides share.
    """
    body = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersionV0(api_key=key, min_version=lo, max_version=hi)
            for key, (lo, hi) in sorted(supported.items())
        ),
    )
    buffer = io.BytesIO()
    buffer.write(_HEADER_V0_TEMPLATE)
    entity_writer(ApiVersionsResponseV0)(buffer, body)
    out = buffer.getbuffer()
    struct.pack_into(">ii", out, 0, len(out) - 4, request.correlation_id)
    del out
    return buffer.getvalue()


# --------------------------------------------------------------------------- error bodies

_EPOCH = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)


def _is_nullable(tp: object) -> bool:
    return typing.get_origin(tp) in (types.UnionType, typing.Union) and type(None) in typing.get_args(tp)


def _strip_none(tp: object) -> object:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _zero_value(f: dataclasses.Field, code: ErrorCode | None) -> object:
    tp = f.type
    if typing.get_origin(_strip_none(tp)) is tuple:
        return ()
    if _is_nullable(tp):
        return None
    inner = _strip_none(tp)
    if dataclasses.is_dataclass(inner):
        return _zero_entity(inner, None)  # type: ignore[arg-type]
    kafka_type = f.metadata.get("kafka_type")
    match kafka_type:
        case "error_code":
            return code if code is not None else ErrorCode.none
        case "string":
            return ""
        case "bytes" | "records":
            return b""
        case "bool":
            return False
        case "uuid":
            return uuid.UUID(int=0)
        case "float64":
            return 0.0
        case "timedelta_i32" | "timedelta_i64":
            return inner.parse(datetime.timedelta(0))  # type: ignore[union-attr]
        case "datetime_i64":
            return _EPOCH
        case _:
            return inner(0) if isinstance(inner, type) else 0  # type: ignore[operator]


def _zero_entity(cls: type, code: ErrorCode | None) -> object:
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("kafka_type") == "error_code" and code is not None:
            kwargs[f.name] = code
        elif f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        else:
            kwargs[f.name] = _zero_value(f, code=None)
    return cls(**kwargs)


def error_response(request: Request, code: ErrorCode) -> object | None:
    """The response entity answering ``request`` as failed with ``code``.

    APIs the broker serves get their shape from :mod:`.error_responses` (every requested item
    echoed with the code where Kafka puts it); None when the request expects no response
    (Produce acks=0). Any other API kio covers is answered only when its response has a
    top-level error code to carry ``code`` (arrays empty, other fields zero); otherwise, and
    when there is no response schema for the version, :class:`LookupError`: an answer that
    cannot say it failed would read as a success, so the connection closes instead.
    """
    try:
        shaped = error_responses.response_for(request.api_key, request.body, request.api_version, code)
    except LookupError:
        pass
    else:
        if shaped is None or not isinstance(shaped, dict):
            return shaped
        return build(response_schema(request.api_key, request.api_version), shaped)
    cls = response_schema(request.api_key, request.api_version)
    if not any(f.metadata.get("kafka_type") == "error_code" for f in dataclasses.fields(cls)):
        raise LookupError(f"api_key={request.api_key} v{request.api_version} has no top-level error code")
    return _zero_entity(cls, code)


@functools.cache
def response_schema(api_key: int, api_version: int) -> type:
    """The response entity class of an API version: kio's, or one written by hand."""
    if (api_key, api_version) in _HAND_CODECS:
        return _HAND_CODECS[api_key, api_version][1]
    try:
        return load_response_schema(api_key, api_version)
    except Exception as e:
        raise LookupError(f"no response schema for api_key={api_key} v{api_version}") from e
