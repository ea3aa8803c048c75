"""Decoded per-key state of one key interval, as user code last left it.

Soft state (semantics I-5): a key's value is loaded from the store on first use and
then kept, so each record of a hot key costs no read or decode. Beyond ``max_keys`` the
least recently used keys are forgotten (a hot key loaded early stays). A value here is what
the batch being built holds for the key; ``restore`` puts back what a failed call may
have changed in place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mwcore.api.codecs import StateCodec

_ABSENT: Any = object()  # not in the cache

Load = Callable[[Sequence[bytes]], list[bytes | None]]  # stored bytes of each key (None: none)


class StateCache:
    def __init__(self, codec: StateCodec[Any], load: Load, max_keys: int = 100_000) -> None:
        self.codec = codec
        self.values: dict[str, Any] = {}  # key -> decoded value (None: no state)
        self._load = load
        self._max_keys = max_keys

    def get(self, key: str) -> Any:
        """The key's value (None: no state), loaded and decoded on first use."""
        values = self.values
        value = values.pop(key, _ABSENT)  # and put back last: the most recently used
        if value is _ABSENT:
            raw = self._load([key.encode()])[0]
            value = None if raw is None else self.codec.decode(raw)
        values[key] = value
        return value

    def preload(self, keys: Iterable[str]) -> None:
        """Load every key not cached yet, in one read."""
        missing = [k for k in keys if k not in self.values]
        if not missing:
            return
        decode = self.codec.decode
        for k, raw in zip(missing, self._load([k.encode() for k in missing]), strict=True):
            self.values[k] = None if raw is None else decode(raw)

    def restore(self, key: str, written: dict[bytes, bytes | None]) -> None:
        """Undo what a failed call did to the key's cached object (it may have mutated it
        in place): back to ``written``'s last good bytes (the open batch), else to the
        store's."""
        raw = written.get(key.encode(), _ABSENT)
        if raw is _ABSENT:
            self.values.pop(key, None)  # reloaded from the store when next needed
        else:
            self.values[key] = None if raw is None else self.codec.decode(raw)

    def trim(self) -> None:
        """Forget the least recently used keys beyond ``max_keys`` (call between
        batches): ``get`` moves a key to the end, so the front is the coldest."""
        excess = len(self.values) - self._max_keys
        if excess > 0:
            for key in list(self.values)[:excess]:
                del self.values[key]
