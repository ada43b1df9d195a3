"""The offset manager and group coordinator: pure state machines over the offsets topic.

No sockets, no files, no asyncio. A shard owns one partition of `__consumer_offsets`:
requests go in with the current time and come out as a `Result` (records to append, and the
responses to release once those records are committed); loading a partition is replaying its
records in order. The coordinator runtime (runtime/) drives it: group_coordinator.py runs
one shard per `__consumer_offsets` partition on it.
"""
