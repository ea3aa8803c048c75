# Types of the native core (src/lib.rs); each function's Python reference is named.
from mwcore.store.checkpoint import Checkpoint

def pack_commit(
    sha: str, keys: list[str], token: str, fencing: bool, commit_id: bytes, cp: Checkpoint
) -> bytes:
    """The commit script's EVALSHA call for ``cp``, in RESP: ``pack_call(sha, keys,
    commit_args(token, fencing, cp))`` (``mwcore.store``), byte for byte."""
