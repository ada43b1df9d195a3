"""A broker's place in a ZooKeeper cluster (zookeeper.connect set), in parts along its seams:

link: ClusterLink, the whole as the broker and its handlers see it (start, stop, the view);
applied_view: the cluster view as this broker last applied it, and waits on it;
roles: applying view changes to local replicas (leader, follower, the replica fetchers);
isr_maintenance: a leader's ISR shrinks and expands;
admin: topic administration, preferred elections, the offsets topic's creation;
config_reloads: topic configs another broker changed;
session_fence: the group coordinator fenced while the ZooKeeper session's lease is not held;
tasks: the background tasks, supervised (one that dies takes the broker down loudly).
"""

from tidemark.broker.cluster.admin import cluster_error_code
from tidemark.broker.cluster.link import ClusterLink

__all__ = ["ClusterLink", "cluster_error_code"]
