"""Where handlers import the cluster link from: it lives in broker/cluster/, split along its seams."""

from tidemark.broker.cluster import ClusterLink, cluster_error_code

__all__ = ["ClusterLink", "cluster_error_code"]
