"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219): byte rates and request time per user and
client id, the throttle time a client is answered with and muted for, and where quotas are kept."""
