"""Gossip among matchers: membership, failure detection and the segment table (the paper's §III-C)."""
