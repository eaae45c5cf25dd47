"""The reasons shared by several "refuses" entries of the manifest."""
_NO_JAVA = "Java workers: phalanx runs Python workers only (no JVM in a worker)"
_NO_CPP = "C++ workers: phalanx runs Python workers only"
_NO_TPU = "TPU slices and pods: no TPU here (phalanx schedules CPUs and CUDA GPUs)"
_NO_REGISTRY = "installs packages from a package registry, which phalanx's nodes cannot reach"
_NO_PROM = "not on phalanx's Prometheus page (scheduler/metrics_page.h) yet"
_NO_RPDB = ("a remote debugger: a task's worker has no terminal, and no listener of phalanx runs commands a peer "
            "sends (phalanx.util.rpdb.WHY)")
