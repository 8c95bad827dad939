"""The lab: benches, the simulator, plots and the demo. No product module imports it; the
`bluedove` command finds its commands through the entry-point group `bluedove.commands`."""
