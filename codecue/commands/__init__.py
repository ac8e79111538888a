"""The ``codecue`` subcommands: one module per subcommand, each with ``add_arguments(parser)`` and
``run(args) -> int``, and the model flags they share (:mod:`codecue.commands.common`)."""
