"""Run the watermark authority: ``python -m services.watermark_authority`` (= ``mw authority``).

Environment (read once, checked at start):

- ``MW_BOOTSTRAP``, ``MW_REDIS_URL``: the broker and the Redis holding the checkpoints,
  report streams and the authority's journal;
- ``MW_NAMESPACE`` (default ``default``);
- ``MW_AUTHORITY_SHARD`` / ``MW_AUTHORITY_SHARDS``: run several, each publishing the
  computations whose names hash to its shard;
- ``MW_AUTHORITY_PERCENTILE`` (default 0.99): the percentile watermark published beside
  the exact one.
"""

import sys

from mwcore import run_authority

if __name__ == "__main__":
    sys.exit(run_authority())
