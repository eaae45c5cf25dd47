"""The manifest's names of the "cluster_utils" page (python/ray/cluster_utils.py)."""

NAMES = [
    ("ray.cluster_utils.Cluster", "cluster_utils", "has", "phalanx.init(num_nodes=N) starts N raylets on loopback"),
    ("ray.cluster_utils.Cluster(initialize_head=)", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster(connect=)", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster(head_node_args=)", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster(shutdown_at_exit=)", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster.add_node", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster.remove_node", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster.wait_for_nodes", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster.connect", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster.shutdown", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster.list_all_nodes", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster.remaining_processes_alive", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster.head_node", "cluster_utils", "has", "an instance attribute in Ray"),
    ("ray.cluster_utils.Cluster.worker_nodes", "cluster_utils", "has", "an instance attribute in Ray"),
    ("ray.cluster_utils.Cluster.address", "cluster_utils", "has", ""),
    ("ray.cluster_utils.Cluster.gcs_address", "cluster_utils", "has", ""),
    ("ray.cluster_utils.AutoscalingCluster", "cluster_utils", "missing", ""),
    ("ray.cluster_utils.AutoscalingCluster.start", "cluster_utils", "missing", ""),
    ("ray.cluster_utils.AutoscalingCluster.shutdown", "cluster_utils", "missing", ""),
]
