"""Clusters on machines reached over SSH: `phalanx up / down / exec CLUSTER.yaml` (docs/cluster.md).
config.py reads the cluster file, ssh.py runs commands on a host, launcher.py starts and stops."""
