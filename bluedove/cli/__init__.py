"""Entry points: the `bluedove` command and its subcommands."""
