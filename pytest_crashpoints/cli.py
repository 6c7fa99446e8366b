"""The ``crashpoints`` command, callable in-process: ``main(["gate", "scenarios"])``.

See docs/cli.md for the subcommands (``gate``, ``replay``, ``show``, ``queue``) and their exit
statuses.
"""

from ._cli.main import main

__all__ = ["main"]

if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.exit(main())
