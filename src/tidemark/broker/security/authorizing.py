"""The broker's authorizer and its ACL store, from its settings (none without
authorizer.class.name)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tidemark.broker.security.acl_store import AclStore, EmbeddedAclStore, ZkAclStore
from tidemark.broker.security.authorizer import Authorizer

if TYPE_CHECKING:
    from tidemark.broker.config import BrokerConfig
    from tidemark.cluster.zk.session import ZkSession
    from tidemark.replication.partition_manager import PartitionManager


class _EmbeddedMetadataOf:
    """The embedded metadata opens with the logs: the store reaches it then."""

    def __init__(self, replicas: PartitionManager) -> None:
        self._replicas = replicas

    @property
    def acls(self) -> list[dict[str, Any]]:
        return self._replicas.metadata.acls

    def set_acls(self, resources: list[dict[str, Any]]) -> None:
        self._replicas.metadata.set_acls(resources)


def authorizer_of(config: BrokerConfig, replicas: PartitionManager,
                  zookeeper: ZkSession | None) -> tuple[Authorizer | None, AclStore | None]:
    if not config["authorizer.class.name"]:
        return None, None
    authorizer = Authorizer(super_users=config["super.users"],
                            allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"])
    store: AclStore = ZkAclStore(authorizer, zookeeper) if zookeeper is not None else \
        EmbeddedAclStore(authorizer, _EmbeddedMetadataOf(replicas))  # type: ignore[arg-type]
    authorizer.store = store  # CreateAcls/DeleteAcls write through it
    return authorizer, store
