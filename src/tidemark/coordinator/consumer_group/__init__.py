"""KIP-848 consumer groups: the broker computes the assignment, members reconcile to it.

group.py is the state the records rebuild (two views, as the classic groups), assignors.py the
server-side assignors, reconciliation.py Kafka's CurrentAssignmentBuilder, heartbeat.py the
ConsumerGroupHeartbeat handler with its sessions, and views.py the read-only answers.
"""
