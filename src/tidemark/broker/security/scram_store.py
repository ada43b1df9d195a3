"""SCRAM credentials (RFC 5802 as Kafka keeps them): salted, iterated, never the password.

Each credential is Kafka's string `salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=N`,
stored per user and mechanism. A clustered broker keeps them where Kafka's ZooKeeper-era brokers
did, /config/users/<user> = {"version":1,"config":{"SCRAM-SHA-512":"salt=...",...}} with a
/config/changes notice per write, so kafka-configs.sh and other ZooKeeper-era tools read and
write the same credentials; a single broker keeps them in its data directory
(scram-credentials.json, replaced atomically). Both stores answer the same small interface.
The derivations are scramp's (a maintained SCRAM library), not ours.
"""

from __future__ import annotations

import base64
import dataclasses
import hmac
import json
import os
import tempfile
import threading
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from scramp import ScramMechanism
from scramp.core import _c_key_stored_key_s_key  # stored/server key from a salted password (KIP-554)

if TYPE_CHECKING:
    from kazoo.client import KazooClient

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's bounds on a SCRAM credential's iterations (ScramMechanism: 4096 minimum, 16384 for
# AlterUserScramCredentials).
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
FILE_NAME = "scram-credentials.json"
USERS_PATH = "/config/users"
# The file store's read-modify-write runs in worker threads (one admin request each): one at a time.
_FILE_WRITES = threading.Lock()


@dataclasses.dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        b64 = lambda raw: base64.b64encode(raw).decode("ascii")  # noqa: E731
        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},server_key={b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        fields = dict(part.split("=", 1) for part in text.split(","))
        return cls(base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
                   base64.b64decode(fields["server_key"]), int(fields["iterations"]))


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> ScramCredential:
    salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(password, iteration_count=iterations)
    return ScramCredential(salt, stored_key, server_key, count)


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """AlterUserScramCredentials carries the salted password (the client salts and iterates)."""
    _, stored_key, server_key = _c_key_stored_key_s_key(ScramMechanism(mechanism).hf, salted_password)
    return ScramCredential(salt, stored_key, server_key, iterations)


def check_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """A plaintext password (SASL/PLAIN) against a SCRAM credential: derived again, compared."""
    try:
        again = make_credential_with_salt(mechanism, password, credential.salt, credential.iterations)
    except Exception:  # noqa: BLE001 - a password scramp cannot prepare (SASLprep) matches nothing
        return False
    return hmac.compare_digest(again.stored_key, credential.stored_key)


def make_credential_with_salt(mechanism: str, password: str, salt: bytes, iterations: int) -> ScramCredential:
    salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations, salt=salt)
    return ScramCredential(salt, stored_key, server_key, count)


class CredentialStore(Protocol):
    """Where a broker's SCRAM credentials live. Calls block (file or ZooKeeper I/O): the broker
    makes them off its event loop."""

    def get(self, user: str) -> dict[str, ScramCredential]: ...

    def put(self, user: str, mechanism: str, credential: ScramCredential) -> None: ...

    def remove(self, user: str, mechanism: str | None = None) -> bool: ...

    def users(self) -> dict[str, dict[str, ScramCredential]]: ...


def _decode_config(config: dict[str, str]) -> dict[str, ScramCredential]:
    return {m: ScramCredential.from_kafka(v) for m, v in config.items() if m in SCRAM_MECHANISMS}


class FileCredentialStore:
    """A single broker's credentials: one JSON file in its data directory, replaced atomically
    (written beside, fsynced, renamed), re-read when it changes (`tidemark users add` while the
    broker runs takes effect on the next authentication)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._cache: tuple[tuple[int, int], dict[str, dict[str, str]]] | None = None

    def _load(self) -> dict[str, dict[str, str]]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return {}
        key = (stat.st_mtime_ns, stat.st_size)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, json.loads(self.path.read_text()).get("users", {}))
        return self._cache[1]

    def _save(self, users: dict[str, dict[str, str]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=FILE_NAME, suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as out:
                json.dump({"version": 1, "users": users}, out, indent=1, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self._cache = None

    def get(self, user: str) -> dict[str, ScramCredential]:
        return _decode_config(self._load().get(user, {}))

    def put(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        with _FILE_WRITES:
            users = {u: dict(c) for u, c in self._load().items()}
            users.setdefault(user, {})[mechanism] = credential.to_kafka()
            self._save(users)

    def remove(self, user: str, mechanism: str | None = None) -> bool:
        with _FILE_WRITES:
            return self._remove(user, mechanism)

    def _remove(self, user: str, mechanism: str | None) -> bool:
        users = {u: dict(c) for u, c in self._load().items()}
        found = user in users and (mechanism is None or mechanism in users[user])
        if found:
            if mechanism is None:
                del users[user]
            else:
                del users[user][mechanism]
                if not users[user]:
                    del users[user]
            self._save(users)
        return found

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: _decode_config(c) for u, c in self._load().items() if _decode_config(c)}


def sanitize(user: str) -> str:
    """The znode name Kafka gives a user (its Sanitizer: URL-encoded, `*` and spaces escaped)."""
    return urllib.parse.quote(user, safe="*").replace("*", "%2A").replace("~", "%7E")


class ZkCredentialStore:
    """A cluster's credentials in ZooKeeper, where kafka-configs.sh --zookeeper keeps them; other
    keys of a user's config (quotas) are kept as they are."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client

    def _read(self, user: str) -> tuple[dict[str, str], int | None]:
        from kazoo.exceptions import NoNodeError

        try:
            data, stat = self.client.get(f"{USERS_PATH}/{sanitize(user)}")
        except NoNodeError:
            return {}, None
        value = json.loads(data) if data else {}
        return {k: str(v) for k, v in (value.get("config") or {}).items()}, stat.version

    def _write(self, user: str, config: dict[str, str], version: int | None) -> None:
        from tidemark.cluster.zk import zk_data

        path = f"{USERS_PATH}/{sanitize(user)}"
        data = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
        if version is None:
            self.client.create(path, data, makepath=True)
        else:
            self.client.set(path, data, version=version)  # a concurrent writer fails us: no lost update
        notice = json.dumps({"version": 2, "entity_path": f"users/{sanitize(user)}"}, separators=(",", ":")).encode()
        self.client.create(zk_data.config_change_path(), notice, sequence=True, makepath=True)

    def get(self, user: str) -> dict[str, ScramCredential]:
        return _decode_config(self._read(user)[0])

    def put(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        config, version = self._read(user)
        config[mechanism] = credential.to_kafka()
        self._write(user, config, version)

    def remove(self, user: str, mechanism: str | None = None) -> bool:
        config, version = self._read(user)
        doomed = [m for m in SCRAM_MECHANISMS if m in config and mechanism in (None, m)]
        for m in doomed:
            del config[m]
        if doomed:
            self._write(user, config, version)
        return bool(doomed)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        from kazoo.exceptions import NoNodeError

        try:
            children = self.client.get_children(USERS_PATH)
        except NoNodeError:
            return {}
        found = {}
        for child in sorted(children):
            user = urllib.parse.unquote(child)
            credentials = self.get(user)
            if credentials:
                found[user] = credentials
        return found
