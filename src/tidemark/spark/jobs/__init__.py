"""Batch jobs over the offsets log: each a thin `main` over pure DataFrame functions.

- offsets_snapshot: the committed offsets as a coordinator would load them;
- lag_report: committed offset against log-end offset per group, topic and partition;
- expiry_report: which committed offsets expire at a given time, under KIP-211 and before it.

They run on local[*] by default and unchanged under spark-submit (`tidemark spark ...`).
"""
