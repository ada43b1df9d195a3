"""Java .properties files, as Kafka's tools take them with --command-config (client settings)."""

from __future__ import annotations

import re

_JAAS_PLAIN = re.compile(r'\busername\s*=\s*"(?P<user>[^"]*)".*?\bpassword\s*=\s*"(?P<password>[^"]*)"', re.S)
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """key=value, key: value or key value lines; # and ! comments; a trailing backslash continues
    a line; backslash escapes as java.util.Properties reads them."""
    properties: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical += line[:-1]
            continue
        logical += line
        key, value = _split(logical)
        properties[key] = value
        logical = ""
    if logical:
        key, value = _split(logical)
        properties[key] = value
    return properties


def _split(line: str) -> tuple[str, str]:
    key_chars: list[str] = []
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\" and i + 1 < len(line):
            key_chars.append(_ESCAPES.get(line[i + 1], line[i + 1]))
            i += 2
            continue
        if char in "=: \t\f":
            break
        key_chars.append(char)
        i += 1
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return "".join(key_chars), _unescape(rest)


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            out.append(_ESCAPES.get(text[i + 1], text[i + 1]))
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def to_librdkafka(properties: dict[str, str]) -> dict[str, str]:
    """Java client settings as librdkafka takes them: a PLAIN/SCRAM sasl.jaas.config becomes
    sasl.username and sasl.password; other keys pass unchanged (librdkafka shares most names and
    refuses the ones it does not know, with their name)."""
    config = dict(properties)
    jaas = config.pop("sasl.jaas.config", None)
    if jaas is not None:
        match = _JAAS_PLAIN.search(jaas)
        if match is None:
            raise ValueError("sasl.jaas.config: only a PlainLoginModule or ScramLoginModule with "
                             "username=\"...\" password=\"...\" is understood")
        config.setdefault("sasl.username", match["user"])
        config.setdefault("sasl.password", match["password"])
    return config
