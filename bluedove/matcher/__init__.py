"""The matcher tier: per-dimension subscription sets, input queues and delivery."""
