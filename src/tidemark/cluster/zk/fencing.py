"""Controller epoch fencing: every controller write is one ZooKeeper multi that first checks
/controller_epoch at the version this controller's election left it at. A controller deposed
meanwhile (a newer election bumped the epoch) has its whole write refused: ControllerMovedError,
nothing changed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import BadVersionError, NoNodeError, RolledBackError, SessionExpiredError

from tidemark.cluster.zk.errors import ControllerMovedError
from tidemark.cluster.zk.session import BoundedCalls
from tidemark.cluster.zk.zk_data import CONTROLLER_EPOCH


@dataclasses.dataclass(frozen=True)
class ControllerFence:
    client: KazooClient
    epoch: int  # the controller epoch this controller was elected with
    epoch_zk_version: int  # /controller_epoch's stat version right after that election
    timeout_s: float | None = None  # each commit's bound (ZkCallTimeoutError past it); None: kazoo's wait

    def commit(self, build: Callable[[TransactionRequest], None]) -> list[object]:
        """Run the operations `build` adds, fenced. Answers the results of those operations (an
        exception instance for a refused one, e.g. BadVersionError for a stale state znode, with
        RolledBackError for the others). Raises ControllerMovedError when the fence refused."""
        transaction = self.client.transaction()
        transaction.check(CONTROLLER_EPOCH, self.epoch_zk_version)
        build(transaction)
        try:
            results = transaction.commit() if self.timeout_s is None \
                else BoundedCalls(self.client, self.timeout_s).commit(transaction)
        except SessionExpiredError:  # /controller went with that session: deposed
            raise ControllerMovedError(f"controller epoch {self.epoch}: the session it was elected in expired") from None
        if isinstance(results[0], (BadVersionError, NoNodeError)):
            raise ControllerMovedError(
                f"controller epoch {self.epoch} (zk version {self.epoch_zk_version}) is no longer current")
        return results[1:]


def first_failure(results: list[object]) -> Exception | None:
    """The operation that made a multi fail (the others report RolledBackError)."""
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            return result
    return None
