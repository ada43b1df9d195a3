"""The transaction coordinator: transactional ids' state machine (state.py), its shard over one
`__transaction_state` partition (shard.py), the marker sender (markers.py) and the runtime over
them (coordinator.py)."""
