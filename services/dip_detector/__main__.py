"""``python -m services.dip_detector``: one dip-detector worker process (``mw run``)."""

import sys

from mwcore.tools.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", "services.dip_detector.computation:DipDetector", *sys.argv[1:]]))
