"""``python -m services.dip_detector``: one dip-detector worker process (``mw run``)."""

import sys

from mwcore import run_computation

if __name__ == "__main__":
    sys.exit(run_computation("services.dip_detector.computation:DipDetector"))
