"""Faults done to real processes under steady publishing, checked against brute force
(`bluedove bench faults`, tests/faults/): the workload (workload.py), the faults (inject.py),
one run and its figures (run.py)."""
