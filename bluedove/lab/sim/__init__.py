"""The scale simulator (the paper's §IV): real mPartition and forwarding code, simulated time, fitted matching cost."""
