"""A local cluster as real processes: the library `bluedove up`, the lab's benches and the tests
use (`bluedove.local.cluster.LocalCluster`). Nothing is imported here: the matcher and dispatcher
commands read `flags.py` as they start, and should not load the supervisor with it."""
