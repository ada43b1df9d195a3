"""What the client layer raises: one line a tool can print as it is."""

from __future__ import annotations


class ClientError(Exception):
    """A call to the cluster failed; the message says what and against which servers."""


class GroupNotFound(ClientError):
    def __init__(self, group: str) -> None:
        super().__init__(f"Consumer group '{group}' does not exist.")
        self.group = group
