"""Replication: partitions and their ISR and high watermark, followers fetching from leaders,
leader epochs and truncation, fetch sessions, the group-commit flusher, acks=all completion."""
