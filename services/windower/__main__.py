"""``python -m services.windower``: one windower worker process (``mw run``)."""

import sys

from mwcore.tools.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "services.windower.computation:Windower", *sys.argv[1:]]))
