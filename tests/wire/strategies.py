"""Hypothesis strategies for kio entities, built from the dataclass fields and their
``kafka_type`` metadata."""

from __future__ import annotations

import dataclasses
import datetime
import functools
import types
import typing

from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta
from kio.static.primitive import i64Timedelta

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}

MAX_ITEMS = 3


def _nullable(tp) -> bool:
    return typing.get_origin(tp) in (types.UnionType, typing.Union) and type(None) in typing.get_args(tp)


def _strip_none(tp):
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        return inner
    return tp


def primitive(kafka_type: str):
    if kafka_type in INT_RANGES:
        lo, hi = INT_RANGES[kafka_type]
        return st.integers(lo, hi)
    match kafka_type:
        case "string":
            return st.text(max_size=12)
        case "bytes" | "records":
            return st.binary(max_size=16)
        case "bool":
            return st.booleans()
        case "uuid":
            # The all-zero UUID is Kafka's "no id" and reads back as None.
            return st.uuids().filter(lambda u: u.int != 0)
        case "float64":
            return st.floats(allow_nan=False, allow_infinity=False)
        case "error_code":
            return st.sampled_from(list(ErrorCode))
        case "timedelta_i32":
            return st.integers(-(2**31), 2**31 - 1).map(
                lambda ms: i32Timedelta.parse(datetime.timedelta(milliseconds=ms))
            )
        case "timedelta_i64":
            return st.integers(-(2**40), 2**40).map(
                lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms))
            )
        case "datetime_i64":
            return st.integers(0, 2**41).map(
                lambda ms: datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
            )
    raise NotImplementedError(kafka_type)


def field_strategy(f: dataclasses.Field):
    tp = f.type
    nullable = _nullable(tp)
    inner = _strip_none(tp)
    if typing.get_origin(inner) is tuple:
        item_tp = typing.get_args(inner)[0]
        if dataclasses.is_dataclass(item_tp):
            item = entities(item_tp)
        else:
            item = primitive(f.metadata["kafka_type"])
        s = st.lists(item, max_size=MAX_ITEMS).map(tuple)
    elif dataclasses.is_dataclass(inner):
        s = entities(inner)
    else:
        kafka_type = f.metadata["kafka_type"]
        if kafka_type == "uuid" and not nullable:
            # A non-nullable uuid still reads the zero UUID back as None in kio.
            s = primitive(kafka_type)
        else:
            s = primitive(kafka_type)
    if nullable:
        s = st.none() | s
    return s


@functools.cache
def entities(cls):
    return st.builds(
        cls, **{f.name: field_strategy(f) for f in dataclasses.fields(cls)}
    )
