"""What one cleaning does with transactions (Kafka's CleanedTransactionMetadata, KIP-98).

The cleaner walks the log from its start in offset order and asks, batch by batch:

- a transactional data batch inside an aborted transaction (the producer's interval
  [first offset, marker offset] of an entry of the segments' .txnindex) is discarded, and its
  records never enter the offset map, so they cannot shadow an older committed value of the
  same key; any other transactional batch belongs to a committed transaction and is compacted
  by key as usual;
- a marker (control batch) is kept while its transaction still has a batch in the log: one was
  read in this cleaning (data is always below its marker, so it was read before it). Only a
  cleaning that read none may remove the marker, and only once its segment is past the delete
  horizon, as for tombstones; so a marker always outlives its data by at least one cleaning;
- an aborted transaction stays in the cleaned segment's .txnindex only while it has data left
  (read in this cleaning); readers need no entry for a transaction with nothing to skip.

Every batch read counts as data left, whether the cleaning then keeps it or not: a batch kept
empty (a producer's last one) keeps its marker and entry, so a reload scanning the cleaned log
never finds a transaction without its marker.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable

from tidemark.records import BatchHeader

from .txn_index import AbortedTxn


class CleanedTransactions:
    def __init__(self, aborted: Iterable[AbortedTxn]):
        # producer id -> its aborted transactions by marker offset, and those offsets sorted
        self._aborted: dict[int, dict[int, AbortedTxn]] = {}
        for txn in aborted:
            self._aborted.setdefault(txn.producer_id, {})[txn.last_offset] = txn
        self._markers = {pid: sorted(txns) for pid, txns in self._aborted.items()}
        self._observed_aborted: set[AbortedTxn] = set()  # aborted transactions with a batch read
        self._observed_committed: set[int] = set()  # producers whose current transaction had a batch read

    def _aborted_txn_of(self, h: BatchHeader) -> AbortedTxn | None:
        markers = self._markers.get(h.producer_id)
        if not markers:
            return None
        # a producer's transactions do not overlap: the first marker after the batch ends it
        i = bisect_left(markers, h.base_offset + h.last_offset_delta)
        if i == len(markers):
            return None
        txn = self._aborted[h.producer_id][markers[i]]
        return txn if txn.first_offset <= h.base_offset else None

    def is_aborted(self, h: BatchHeader) -> bool:
        """Whether a data batch belongs to an aborted transaction (a pure question: the offset
        map asks it too)."""
        return h.is_transactional and not h.is_control and self._aborted_txn_of(h) is not None

    def on_batch(self, h: BatchHeader) -> bool:
        """A data batch read while cleaning: True if it is aborted (its records are dropped)."""
        if not h.is_transactional or h.producer_id < 0:
            return False
        txn = self._aborted_txn_of(h)
        if txn is None:
            self._observed_committed.add(h.producer_id)
            return False
        self._observed_aborted.add(txn)
        return True

    def on_marker(self, h: BatchHeader) -> tuple[bool, AbortedTxn | None]:
        """A control batch read while cleaning: (whether its transaction still has a batch in
        the log, the aborted transaction to keep in the cleaned .txnindex if any)."""
        committed_data = h.producer_id in self._observed_committed
        self._observed_committed.discard(h.producer_id)
        txn = self._aborted.get(h.producer_id, {}).get(h.base_offset)
        if txn is not None and txn in self._observed_aborted:
            self._observed_aborted.discard(txn)
            return True, txn
        return committed_data, None
