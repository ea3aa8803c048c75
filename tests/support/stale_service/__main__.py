"""A service entry point whose computation is gone (renamed): ``tests/test_compose.py``
shows that the compose check catches a command that runs it."""

import sys

from mwcore.tools.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "services.windower.computation:RenamedWindower", *sys.argv[1:]]))
