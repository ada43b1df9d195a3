"""AclAuthorizer's decision: matching of literal, wildcard and prefixed patterns, principals and
hosts, implied operations, deny wins, super.users, allow.everyone.if.no.acl.found."""

from __future__ import annotations

import pytest

from tidemark.broker.acl_operations import TOPIC_OPERATIONS, AclOperation
from tidemark.broker.security.acl_store import decode_resources, encode_resources
from tidemark.broker.security.authorizer import (AccessControlEntry, AclBinding, AclBindingFilter, Authorizer,
                                                 PatternType, PermissionType, ResourcePattern, ResourceType,
                                                 binding_invalid)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
Op = AclOperation
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def authorizer(*acls: tuple, **settings) -> Authorizer:
    grouped: dict = {}
    for rtype, name, pattern, principal, host, op, perm in acls:
        key = ResourcePattern(rtype, name, pattern)
        grouped[key] = grouped.get(key, frozenset()) | {AccessControlEntry(principal, host, op, perm)}
    return Authorizer(grouped, **settings)


def lit(rtype, name, principal, op, perm=ALLOW, host="*"):
    return rtype, name, PatternType.LITERAL, principal, host, op, perm


def pre(rtype, name, principal, op, perm=ALLOW, host="*"):
    return rtype, name, PatternType.PREFIXED, principal, host, op, perm


def test_literal_matches_only_its_name():
    a = authorizer(lit(T, "orders", ALICE, Op.READ))
    assert a.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert not a.authorize(ALICE, HOST, Op.READ, T, "orders2")
    assert not a.authorize(ALICE, HOST, Op.WRITE, T, "orders")
    assert not a.authorize(BOB, HOST, Op.READ, T, "orders")
    assert not a.authorize(ALICE, HOST, Op.READ, G, "orders")  # another resource type


def test_wildcard_resource_principal_and_host():
    a = authorizer(lit(T, "*", "User:*", Op.WRITE))
    assert a.authorize(BOB, HOST, Op.WRITE, T, "anything")
    b = authorizer(lit(T, "orders", ALICE, Op.READ, host="10.0.0.2"))
    assert not b.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert b.authorize(ALICE, "10.0.0.2", Op.READ, T, "orders")


def test_prefixed_matches_names_starting_with_it():
    a = authorizer(pre(T, "orders-", ALICE, Op.READ))
    assert a.authorize(ALICE, HOST, Op.READ, T, "orders-eu")
    assert a.authorize(ALICE, HOST, Op.READ, T, "orders-")
    assert not a.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert not a.authorize(ALICE, HOST, Op.READ, T, "xorders-eu")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_describe_is_implied(granted):
    a = authorizer(lit(T, "t", ALICE, granted))
    assert a.authorize(ALICE, HOST, Op.DESCRIBE, T, "t")
    assert not a.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, T, "t")


def test_describe_configs_implied_by_alter_configs_and_all_grants_everything():
    a = authorizer(lit(T, "t", ALICE, Op.ALTER_CONFIGS), lit(T, "u", ALICE, Op.ALL))
    assert a.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, T, "t")
    assert not a.authorize(ALICE, HOST, Op.DESCRIBE, T, "t")
    assert all(a.authorize(ALICE, HOST, op, T, "u") for op in TOPIC_OPERATIONS)


def test_deny_wins_and_implies_nothing():
    a = authorizer(pre(T, "o", ALICE, Op.ALL), lit(T, "orders", "User:*", Op.WRITE, DENY))
    assert not a.authorize(ALICE, HOST, Op.WRITE, T, "orders")
    assert a.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert a.authorize(ALICE, HOST, Op.DESCRIBE, T, "orders")  # a WRITE deny does not deny DESCRIBE
    b = authorizer(lit(T, "*", ALICE, Op.READ), lit(T, "t", ALICE, Op.ALL, DENY))
    assert not b.authorize(ALICE, HOST, Op.READ, T, "t")
    c = authorizer(lit(T, "t", ALICE, Op.READ), lit(T, "t", ALICE, Op.READ, DENY, host=HOST))
    assert not c.authorize(ALICE, HOST, Op.READ, T, "t")
    assert c.authorize(ALICE, "10.0.0.9", Op.READ, T, "t")


def test_super_users_and_no_acl_found():
    a = authorizer(lit(T, "t", ALICE, Op.READ), super_users={"User:admin"})
    assert a.authorize("User:admin", HOST, Op.DELETE, C, "kafka-cluster")
    assert not a.authorize(ALICE, HOST, Op.READ, T, "no-acls")  # false by default
    b = authorizer(lit(T, "t", ALICE, Op.READ), allow_everyone_if_no_acl_found=True)
    assert b.authorize(BOB, HOST, Op.WRITE, T, "no-acls")
    assert not b.authorize(BOB, HOST, Op.WRITE, T, "t")  # the resource has ACLs: they decide


def test_authorized_operations_and_by_resource_type():
    a = authorizer(lit(T, "t", ALICE, Op.READ), lit(T, "*", ALICE, Op.ALTER_CONFIGS))
    assert a.authorized_operations(ALICE, HOST, T, "t", TOPIC_OPERATIONS) == {
        Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    b = authorizer(pre(T, "x", ALICE, Op.WRITE))
    assert b.authorize_any(ALICE, HOST, Op.WRITE, T)
    assert not b.authorize_any(BOB, HOST, Op.WRITE, T)
    c = authorizer(pre(T, "x", ALICE, Op.WRITE), pre(T, "", ALICE, Op.WRITE, DENY))
    assert not c.authorize_any(ALICE, HOST, Op.WRITE, T)


def test_filters_for_describe_and_delete():
    literal = AclBinding(ResourcePattern(T, "orders"), AccessControlEntry(ALICE, "*", Op.READ, ALLOW))
    prefixed = AclBinding(ResourcePattern(T, "ord", PatternType.PREFIXED), AccessControlEntry(BOB, "*", Op.WRITE, DENY))
    wildcard = AclBinding(ResourcePattern(T, "*"), AccessControlEntry(BOB, "*", Op.READ, ALLOW))
    every = [literal, prefixed, wildcard]
    assert [b for b in every if AclBindingFilter().matches(b)] == every
    assert [b for b in every if AclBindingFilter(T, "orders").matches(b)] == [literal]
    assert [b for b in every if AclBindingFilter(T, "orders", PatternType.MATCH).matches(b)] == every
    assert [b for b in every if AclBindingFilter(principal=BOB, permission_type=DENY).matches(b)] == [prefixed]
    assert [b for b in every if AclBindingFilter(pattern_type=PatternType.LITERAL).matches(b)] == [literal, wildcard]


def test_invalid_bindings():
    def binding(rtype=T, name="t", pattern=PatternType.LITERAL, principal=ALICE, op=Op.READ, perm=ALLOW):
        return AclBinding(ResourcePattern(rtype, name, pattern), AccessControlEntry(principal, "*", op, perm))
    assert binding_invalid(binding()) is None
    assert binding_invalid(binding(rtype=C, name="other"))
    assert binding_invalid(binding(op=Op.ANY))
    assert binding_invalid(binding(pattern=PatternType.MATCH))
    assert binding_invalid(binding(principal="alice"))
    assert binding_invalid(binding(perm=PermissionType.ANY))


def test_kafka_json_round_trip():
    a = authorizer(lit(T, "orders", ALICE, Op.READ), pre(G, "app-", BOB, Op.ALL, DENY))
    encoded = encode_resources(a.acls)
    assert {"resourceType": "Topic", "name": "orders", "patternType": "LITERAL", "acls": [
        {"principal": ALICE, "permissionType": "Allow", "operation": "Read", "host": "*"}]} in encoded
    assert decode_resources(encoded) == a.acls
