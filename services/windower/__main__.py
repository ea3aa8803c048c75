"""``python -m services.windower``: one windower worker process (``mw run``)."""

import sys

from mwcore import run_computation

if __name__ == "__main__":
    sys.exit(run_computation("services.windower.computation:Windower"))
