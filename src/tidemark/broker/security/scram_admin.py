"""AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554): admin clients manage
SCRAM users through the broker, with Kafka's checks and error codes. The client salts and
iterates the password; the broker derives and keeps the stored and server keys only.
(Authorization of these requests, ALTER/DESCRIBE on the cluster, comes with ACLs.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from tidemark.broker.security import sasl
from tidemark.broker.security.scram_store import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    CredentialStore,
    FileCredentialStore,
    ZkCredentialStore,
    credential_from_salted_password,
)

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

T = TypeVar("T")
# Kafka's ScramMechanism type bytes on the wire
MECHANISM_TYPES = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_BYTES = {name: byte for byte, name in MECHANISM_TYPES.items()}


async def handle_sasl_after_authentication(ctx: RequestContext, request: Request) -> dict[str, Any]:
    return sasl.refuse_after_authentication(request)


def _store(ctx: RequestContext) -> CredentialStore:
    if ctx.cluster is not None:
        return ZkCredentialStore(ctx.cluster.client)
    return FileCredentialStore(ctx.partitions.data_dir)


async def _call(ctx: RequestContext, function: Callable[..., T], *args: Any) -> T:
    """Store calls block (ZooKeeper or the disk): off the event loop."""
    if ctx.cluster is not None:
        return await ctx.cluster.session.call(function, *args)
    return await asyncio.to_thread(function, *args)


async def handle_describe(ctx: RequestContext, request: Request) -> dict[str, Any]:
    store = _store(ctx)
    users = await _call(ctx, store.users)
    named = None if not request.body.users else [u.name for u in request.body.users]
    results = []
    if named is None:
        for user in sorted(users):
            results.append(_described(user, users[user]))
    else:
        seen: set[str] = set()
        duplicates = {n for n in named if n in seen or seen.add(n)}  # type: ignore[func-returns-value]
        for user in dict.fromkeys(named):
            if user in duplicates:
                results.append(_user_error(user, ErrorCode.duplicate_resource,
                                           "Cannot describe SCRAM credentials for the same user twice in a "
                                           "single request"))
            elif user not in users:
                results.append(_user_error(user, ErrorCode.resource_not_found,
                                           "Attempt to describe a user credential that does not exist"))
            else:
                results.append(_described(user, users[user]))
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "results": results}


def _described(user: str, credentials: dict[str, Any]) -> dict[str, Any]:
    return {"user": user, "error_code": 0, "error_message": None,
            "credential_infos": [{"mechanism": MECHANISM_BYTES[m], "iterations": c.iterations}
                                 for m, c in sorted(credentials.items())]}


def _user_error(user: str, code: ErrorCode, message: str) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message, "credential_infos": []}


async def handle_alter(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    store = _store(ctx)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    order: list[str] = []
    changes: list[tuple[str, str, Any]] = []  # (user, mechanism, credential or None: delete)
    seen: set[tuple[str, str]] = set()
    twice: set[str] = set()
    for item in list(body.deletions) + list(body.upsertions):
        user = item.name
        if user not in order:
            order.append(user)
        mechanism = MECHANISM_TYPES.get(item.mechanism)
        if (user, str(item.mechanism)) in seen:
            twice.add(user)
        seen.add((user, str(item.mechanism)))
        if user in errors:
            continue
        if not user:
            errors[user] = (ErrorCode.unacceptable_credential, "Username must not be empty")
        elif mechanism is None:
            errors[user] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        elif hasattr(item, "salted_password"):
            if item.iterations < MIN_ITERATIONS:
                errors[user] = (ErrorCode.unacceptable_credential, "Too few iterations")
            elif item.iterations > MAX_ITERATIONS:
                errors[user] = (ErrorCode.unacceptable_credential, "Too many iterations")
            elif not item.salt or not item.salted_password:
                errors[user] = (ErrorCode.unacceptable_credential, "Credential must not be empty")
            else:
                changes.append((user, mechanism,
                                credential_from_salted_password(mechanism, item.salt, item.salted_password,
                                                                item.iterations)))
        else:
            changes.append((user, mechanism, None))
    for user in twice:
        errors[user] = (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")
    for user, mechanism, credential in changes:
        if user in errors:
            continue
        if credential is None:
            if not await _call(ctx, store.remove, user, mechanism):
                errors[user] = (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
        else:
            await _call(ctx, store.put, user, mechanism, credential)
    return {"throttle_time": 0, "results": [
        {"user": u, "error_code": errors.get(u, (ErrorCode.none, None))[0],
         "error_message": errors.get(u, (ErrorCode.none, None))[1]} for u in order]}
