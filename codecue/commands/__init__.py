"""CLI subcommands that are not part of a bigger subsystem."""
