"""The skew-statistics job: subscriptions and sampled messages in, a partition seed out (docs/spark.md)."""
