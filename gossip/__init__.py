"""Gossip among matchers: membership, failure detection and the segment table (seed 001 §III-C)."""
