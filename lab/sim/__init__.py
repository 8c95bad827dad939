"""The scale simulator (seed 001 §IV): real mPartition and forwarding code, simulated time, fitted matching cost."""
