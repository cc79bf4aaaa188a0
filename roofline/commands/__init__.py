"""Subcommands of the `roofline` CLI, one module each."""
