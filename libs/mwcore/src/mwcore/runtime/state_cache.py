"""Decoded per-key state of one key interval, as user code last left it.

Soft state (semantics I-5): a key's value is loaded from the store on first use and
then kept, so each record of a hot key costs no read or decode. Beyond ``max_keys`` the
least recently used keys are forgotten (a hot key loaded early stays). A value here is what
the batch being built holds for the key; ``restore`` puts back what a failed call may
have changed in place.

When the interval's whole stored state was read at acquisition (``know``), a key not
cached is served from that read, and a key absent from it has no state: no read from the
store until the cache forgets a key (``trim``: then every key not cached is read from the
store again, as without it) or drops one to undo a failed call (``restore``: that key is
read from the store again). This is right
because nothing but the owner writes an interval's state (semantics I-5): the read
cannot go stale while its keys are untouched, and a touched key stays cached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from mwcore.api.codecs import StateCodec
from mwcore.controls import SAFE, NegativeControls

_ABSENT: Any = object()  # not in the cache

Load = Callable[[Sequence[bytes]], list[bytes | None]]  # stored bytes of each key (None: none)


class StateCache:
    def __init__(
        self,
        codec: StateCodec[Any],
        load: Load,
        max_keys: int = 100_000,
        controls: NegativeControls = SAFE,
    ) -> None:
        self.codec = codec
        self.values: dict[str, Any] = {}  # key -> decoded value (None: no state)
        self._load = load
        self._max_keys = max_keys
        # The stored state of keys not cached yet, when the whole was read (None: not
        # known, each key read on first use), and the keys to read from the store anyway.
        self._stored: dict[str, bytes] | None = None
        self._reread: set[str] = set()
        self._keep_known = controls.trust_forgotten_state

    @property
    def knows_all(self) -> bool:
        """Whether a key not cached is served from the state read at acquisition."""
        return self._stored is not None

    def know(self, stored: dict[bytes, bytes]) -> None:
        """Every key's stored state, read whole (a key not in it has none)."""
        self._stored = {k.decode(): v for k, v in stored.items()}
        self._reread.clear()

    def _read(self, keys: list[str]) -> list[bytes | None]:
        stored = self._stored
        if stored is None:
            return self._load([k.encode() for k in keys])
        if not self._reread or not self._reread.intersection(keys):
            return [stored.pop(k, None) for k in keys]
        again = [k for k in keys if k in self._reread]
        loaded = dict(zip(again, self._load([k.encode() for k in again]), strict=True))
        self._reread.difference_update(again)
        return [loaded[k] if k in loaded else stored.pop(k, None) for k in keys]

    def get(self, key: str) -> Any:
        """The key's value (None: no state), loaded and decoded on first use."""
        values = self.values
        value = values.pop(key, _ABSENT)  # and put back last: the most recently used
        if value is _ABSENT:
            raw = self._read([key])[0]
            value = None if raw is None else self.codec.decode(raw)
        values[key] = value
        return value

    def preload(self, keys: Iterable[str]) -> None:
        """Load every key not cached yet, in one read (none when the whole is known)."""
        missing = list(dict.fromkeys(k for k in keys if k not in self.values))  # each once
        if not missing:
            return
        decode = self.codec.decode
        for k, raw in zip(missing, self._read(missing), strict=True):
            self.values[k] = None if raw is None else decode(raw)

    def restore(self, key: str, written: dict[bytes, bytes | None]) -> None:
        """Undo what a failed call did to the key's cached object (it may have mutated it
        in place): back to ``written``'s last good bytes (the open batch), else to the
        store's."""
        raw = written.get(key.encode(), _ABSENT)
        if raw is _ABSENT:
            self.values.pop(key, None)  # reloaded from the store when next needed
            if self._stored is not None and not self._keep_known:
                self._reread.add(key)  # (the read at acquisition may be older than the store)
        else:
            self.values[key] = None if raw is None else self.codec.decode(raw)

    def trim(self) -> None:
        """Forget the least recently used keys beyond ``max_keys`` (call between
        batches): ``get`` moves a key to the end, so the front is the coldest."""
        excess = len(self.values) - self._max_keys
        if excess > 0:
            for key in list(self.values)[:excess]:
                del self.values[key]
            if not self._keep_known:  # a forgotten key may have changed since the read
                self._stored = None
                self._reread.clear()
