"""`bluedove bench kernel` runs end to end on a small workload and checks itself exactly."""

import json
import subprocess
import sys


def test_bench_kernel_json_smoke():
    r = subprocess.run([sys.executable, "-m", "bluedove", "bench", "kernel", "--workload", "paper", "--subs", "2000",
                        "--messages", "500", "--partitions", "5", "--repeat", "1", "--verify", "50", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["workload"].startswith("paper") and out["exact"] is True
    assert out["msgs_per_s"] > 0 and out["full_msgs_per_s"] > 0
    assert out["matches_per_msg"] > 0 and out["subscriptions"] == 2000
