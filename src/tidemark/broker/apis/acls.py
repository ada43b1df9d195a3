"""CreateAcls, DescribeAcls, DeleteAcls (Kafka's API keys 30, 29, 31).

As Kafka: without an authorizer every answer is SECURITY_DISABLED; creating and deleting need
ALTER on the cluster, describing DESCRIBE on it (CLUSTER_AUTHORIZATION_FAILED otherwise). A
creation Kafka's validation refuses answers INVALID_REQUEST for that creation alone; the others
are stored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tidemark.broker.acl_operations import AclOperation
from tidemark.broker.security import access
from tidemark.broker.security.acl_store import filter_from
from tidemark.broker.security.authorizer import (AccessControlEntry, AclBinding, PatternType, PermissionType,
                                                 ResourcePattern, ResourceType, binding_invalid)

if TYPE_CHECKING:
    from tidemark.broker.context import RequestContext
    from tidemark.wire.codec import Request

_DISABLED = "No Authorizer is configured on the broker"
_REFUSED = "Cluster authorization failed."  # Kafka sends its exception's message; clients show it


def _store(ctx: RequestContext) -> Any:
    return None if ctx.authorizer is None else ctx.authorizer.store



async def handle_create(ctx: RequestContext, request: Request) -> dict[str, Any]:
    creations = request.body.creations
    store = _store(ctx)
    if store is None:
        code, message = ErrorCode.security_disabled, _DISABLED
    elif not access.allowed(ctx, access.ALTER, access.CLUSTER):
        code, message = ErrorCode.cluster_authorization_failed, _REFUSED
    else:
        results, valid = [], []
        for creation in creations:
            binding, why = _binding(creation)
            results.append({"error_code": ErrorCode.invalid_request if why else ErrorCode.none,
                            "error_message": why})
            if binding is not None:
                valid.append(binding)
        if valid:
            await store.create(valid)
        return {"throttle_time": 0, "results": results}
    return {"throttle_time": 0, "results": [{"error_code": code, "error_message": message} for _ in creations]}


def _binding(creation: Any) -> tuple[AclBinding | None, str | None]:
    try:
        binding = AclBinding(
            ResourcePattern(ResourceType(creation.resource_type), creation.resource_name,
                            PatternType(creation.resource_pattern_type)),
            AccessControlEntry(creation.principal, creation.host, AclOperation(creation.operation),
                               PermissionType(creation.permission_type)))
    except ValueError as exc:
        return None, str(exc)
    why = binding_invalid(binding)
    return (None, why) if why else (binding, None)


async def handle_describe(ctx: RequestContext, request: Request) -> dict[str, Any]:
    body = request.body
    if _store(ctx) is None:
        return _describe_error(ErrorCode.security_disabled, _DISABLED)
    if not access.allowed(ctx, access.DESCRIBE, access.CLUSTER):
        return _describe_error(ErrorCode.cluster_authorization_failed, _REFUSED)
    try:
        wanted = filter_from(body.resource_type_filter, body.resource_name_filter, body.pattern_type_filter,
                             body.principal_filter, body.host_filter, body.operation, body.permission_type)
    except ValueError as exc:
        return _describe_error(ErrorCode.invalid_request, str(exc))
    if wanted.invalid():
        return _describe_error(ErrorCode.invalid_request, wanted.invalid())
    assert ctx.authorizer is not None
    resources: dict[ResourcePattern, list[dict[str, Any]]] = {}
    for binding in ctx.authorizer.bindings():
        if wanted.matches(binding):
            e = binding.entry
            resources.setdefault(binding.pattern, []).append(
                {"principal": e.principal, "host": e.host, "operation": e.operation,
                 "permission_type": e.permission_type})
    return {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "resources": [
        {"resource_type": p.resource_type, "resource_name": p.name, "pattern_type": p.pattern_type, "acls": acls}
        for p, acls in resources.items()]}


def _describe_error(code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "resources": []}


async def handle_delete(ctx: RequestContext, request: Request) -> dict[str, Any]:
    filters = request.body.filters
    store = _store(ctx)
    if store is None:
        return _delete_error(filters, ErrorCode.security_disabled, _DISABLED)
    if not access.allowed(ctx, access.ALTER, access.CLUSTER):
        return _delete_error(filters, ErrorCode.cluster_authorization_failed, _REFUSED)
    parsed, results = [], []
    for f in filters:
        try:
            acl_filter = filter_from(f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter,
                                     f.principal_filter, f.host_filter, f.operation, f.permission_type)
            why = acl_filter.invalid()
        except ValueError as exc:
            acl_filter, why = None, str(exc)
        parsed.append(None if why else acl_filter)
        results.append({"error_code": ErrorCode.invalid_request if why else ErrorCode.none, "error_message": why,
                        "matching_acls": []})
    deleted = iter(await store.delete([f for f in parsed if f is not None]))
    for acl_filter, result in zip(parsed, results):
        if acl_filter is not None:
            result["matching_acls"] = [_matching(b) for b in next(deleted)]
    return {"throttle_time": 0, "filter_results": results}


def _matching(binding: AclBinding) -> dict[str, Any]:
    p, e = binding.pattern, binding.entry
    return {"error_code": ErrorCode.none, "error_message": None, "resource_type": p.resource_type,
            "resource_name": p.name, "pattern_type": p.pattern_type, "principal": e.principal, "host": e.host,
            "operation": e.operation, "permission_type": e.permission_type}


def _delete_error(filters: Any, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time": 0, "filter_results": [
        {"error_code": code, "error_message": message, "matching_acls": []} for _ in filters]}
