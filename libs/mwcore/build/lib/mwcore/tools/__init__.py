"""The ``mw`` command: its subcommands, ``mw up`` and the local stack, ``mw tail``, the service template."""
