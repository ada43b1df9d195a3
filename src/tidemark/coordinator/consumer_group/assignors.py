"""Kafka's server-side assignors (group.consumer.assignors): `uniform` and `range`.

An assignor gets the members' subscriptions (member id -> subscribed topic names), the
subscribed topics' metadata and the current target assignment, and returns the new target
(member id -> topic id -> partitions). Both are deterministic: members are taken in member id
order, partitions in topic name then partition order.

uniform: balanced (member counts differ by at most one among members able to take a partition)
and sticky (a member keeps what it had unless that breaks the balance), as Kafka's uniform
assignor. range: per topic, contiguous ranges over the members subscribed to it, the first
(partitions mod members) taking one more, as Kafka's range assignor without stickiness.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from tidemark.records.consumer_group_schema import Assignment, TopicMetadata

Subscriptions = Mapping[str, frozenset[str]]  # member id -> topic names
Target = dict[str, Assignment]
TopicPartition = tuple[uuid.UUID, int]


def _freeze(owned: dict[str, dict[uuid.UUID, set[int]]], members: Subscriptions) -> Target:
    return {m: {t: frozenset(ps) for t, ps in owned.get(m, {}).items() if ps} for m in members}


def uniform(members: Subscriptions, topics: Mapping[str, TopicMetadata], current: Mapping[str, Assignment]) -> Target:
    order = sorted(members)
    partitions: list[tuple[str, TopicPartition]] = [
        (name, (topics[name].topic_id, p)) for name in sorted(topics) for p in range(topics[name].num_partitions)]
    eligible = {tp: [m for m in order if name in members[m]] for name, tp in partitions}
    owner: dict[TopicPartition, str] = {}
    count = {m: 0 for m in order}
    # Keep what each member had, while still subscribed.
    for m in order:
        for topic_id, ps in sorted(current.get(m, {}).items(), key=lambda i: str(i[0])):
            for p in sorted(ps):
                tp = (topic_id, p)
                if tp in eligible and m in eligible[tp] and tp not in owner:
                    owner[tp] = m
                    count[m] += 1
    # Hand out the rest: the least loaded eligible member, partitions with fewest candidates first.
    for _, tp in sorted(partitions, key=lambda item: len(eligible[item[1]])):
        if tp in owner or not eligible[tp]:
            continue
        m = min(eligible[tp], key=lambda c: (count[c], c))
        owner[tp] = m
        count[m] += 1
    # Balance: move a partition from a member with at least two more than an eligible one.
    moved = True
    while moved:
        moved = False
        for _, tp in partitions:
            m = owner.get(tp)
            if m is None:
                continue
            target = min(eligible[tp], key=lambda c: (count[c], c))
            if count[m] - count[target] >= 2:
                owner[tp] = target
                count[m] -= 1
                count[target] += 1
                moved = True
    owned: dict[str, dict[uuid.UUID, set[int]]] = {}
    for (topic_id, p), m in owner.items():
        owned.setdefault(m, {}).setdefault(topic_id, set()).add(p)
    return _freeze(owned, members)


def range_(members: Subscriptions, topics: Mapping[str, TopicMetadata], current: Mapping[str, Assignment]) -> Target:
    owned: dict[str, dict[uuid.UUID, set[int]]] = {}
    for name in sorted(topics):
        subscribers = sorted(m for m in members if name in members[m])
        if not subscribers:
            continue
        total = topics[name].num_partitions
        quota, extra = divmod(total, len(subscribers))
        start = 0
        for i, m in enumerate(subscribers):
            n = quota + (1 if i < extra else 0)
            if n:
                owned.setdefault(m, {})[topics[name].topic_id] = set(range(start, start + n))
            start += n
    return _freeze(owned, members)


ASSIGNORS = {"uniform": uniform, "range": range_}
