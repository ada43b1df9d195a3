"""Protocol errors raised by the wire layer.

Every one of them means the connection that produced the bytes must be closed;
nothing else is affected (DESIGN.md principle 1).
"""


class ProtocolError(Exception):
    """The peer sent bytes that break the Kafka protocol."""


class FrameTooLarge(ProtocolError):
    """A frame's size prefix is negative or above socket.request.max.bytes."""


class MalformedRequest(ProtocolError):
    """A frame could not be decoded as the request its header announces."""


class NoResponseExpected(ProtocolError):
    """A request that gets no response (Produce with acks=0) failed: closing the connection is
    the only way to tell the client."""
