"""Elasticity: where a joining matcher splits the table, when to add or remove matchers, and
the backends that do it (local processes, a Kubernetes StatefulSet)."""
