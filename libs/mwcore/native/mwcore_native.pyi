# Types of the native core (src/lib.rs), checked against the built module by mypy.stubtest
# (make lint); each class's Python reference is named. Only mwcore.cores.native imports it.
from collections.abc import Callable, Sequence
from typing import Any, Self, final

from mwcore.api.record import Production

__all__ = [
    "STRINGS_GENERATION",
    "Applier",
    "Bloom",
    "Context",
    "Decoder",
    "Encoder",
    "GroupConsumer",
    "KafkaFailure",
    "Msg",
    "PanicException",
    "Producer",
    "Screener",
    "StateHandle",
    "TimerHandle",
    "TimerQueue",
    "init",
    "pack_commit",
    "panic_on_key",
    "read_ids",
]

def init(
    *,
    id_bytes: int,
    mac_bytes: int,
    headers: tuple[str, str, str, str],
    max_value_bytes: int,
    timer_index: int,
    domain_codes: tuple[int, ...],
    internal_error: type[Exception],
    undeclared: Callable[[Any, Any], KeyError],
    too_large: Callable[[Any, int], ValueError],
    set_none: Callable[[], ValueError],
    max_headers: int,
    max_header_bytes: int,
    to_send: Callable[[Any], tuple[tuple[str, bytes], ...]],
    over_bounds: Callable[[int, int], Exception],
) -> None:
    """The constants both sides share, defined once in the package (the seam gives them
    at import: ``mwcore.cores.native.constants``)."""

class PanicException(BaseException):
    """A panic of the native core outside its per-record code (PyO3's)."""

def panic_on_key(key: str) -> None:
    """Test plumbing (``MW_PANIC_KEY``): panic before user code runs on a record of ``key``."""

def pack_commit(
    sha: str,
    keys: Sequence[str],
    token: str,
    fencing: bool,
    commit_id: bytes,
    state: dict[bytes, bytes | None],
    timers: dict[bytes, bytes | None],
    pending: dict[bytes, list[Production]],
    acked: list[bytes],
    seen: dict[bytes, int],
    positions: dict[str, int],
    gc_below: int | None,
    segments: dict[bytes, bytes | None],
) -> bytes:
    """The commit script's EVALSHA call of a checkpoint (its parts), in RESP:
    ``pack_call(sha, keys, commit_args(token, fencing, cp))`` (``mwcore.store``), byte for byte."""

@final
class Bloom:
    """The Bloom filter of record ids, bit for bit ``mwcore.runtime.bloom.BloomFilter``."""

    @property
    def capacity(self) -> int: ...
    @property
    def count(self) -> int: ...
    def __new__(cls, capacity: int = 100_000, bits_per_id: int = 12, hashes: int = 7) -> Self: ...
    @property
    def full(self) -> bool: ...
    @property
    def nbytes(self) -> int: ...
    def add_many(self, keys: Sequence[bytes]) -> None: ...
    def contains_many(self, keys: Sequence[bytes]) -> list[bool]: ...
    def duplicates(self, rids: list[bytes], in_batch: set[bytes]) -> tuple[list[bool], list[int]]: ...
    def words(self) -> bytes: ...

@final
class Decoder:
    """Avro values of one reader schema (``plan``: ``mwcore.serde.native_plan``; ``header``:
    the reader schema's own) decoded as the generated decoder does; any other value goes
    to ``fallback`` (``AvroSerde.decode``), which reads it or raises. A record of the plan
    that names a class (``("record", fields, cls)``: ``mwcore.serde.typed.classes``) is
    made an instance of it around its dict; ``make``, where given, is called on each
    value decoded here."""

    def __new__(
        cls,
        plan: tuple[Any, ...],
        header: bytes,
        max_items: int,
        fallback: Callable[[bytes], Any],
        make: Callable[[Any], Any] | None = None,
    ) -> Self: ...
    def decode(self, data: bytes) -> Any: ...
    @property
    def deferred(self) -> int:
        """How many values it handed to ``fallback``."""

@final
class Encoder:
    """Avro values of one schema encoded, after ``prefix``, as the generated encoder
    does, where every part has exactly the type the schema reads back (a record: a
    dict, or an instance of exactly the class the plan names, from its ``__dict__``);
    any other value goes to ``fallback`` (``AvroSerde.encode``), which writes it or raises."""

    def __new__(cls, plan: tuple[Any, ...], prefix: bytes, fallback: Callable[[Any], bytes]) -> Self: ...
    def encode(self, value: Any) -> bytes: ...
    @property
    def deferred(self) -> int:
        """How many values it handed to ``fallback``."""

@final
class Producer:
    """The worker's productions on librdkafka, reported per batch (reference:
    ``mwcore.transport.producer.Sender``; wrapped by ``mwcore.cores.native.sender``)."""

    def __new__(cls, config: dict[str, str]) -> Self: ...
    def send_all(
        self,
        batch: int,
        productions: list[Any],
        id_header: str | None,
        extra: Sequence[tuple[str, bytes | str | None]],
        mac_header: str,
        mac_key: bytes | None,
        mac_v1: bool,
    ) -> int: ...
    def poll(self, timeout: float) -> list[Any]: ...
    def flush(self, timeout: float) -> tuple[int, list[Any]]: ...
    def purge(self) -> list[Any]: ...

class KafkaFailure(Exception):
    """A librdkafka error: args ``(code, text)``."""

@final
class Msg:
    """A consumed message, with the methods the runtime reads of confluent-kafka's."""

    def __new__(
        cls,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: tuple[int, int],
        headers: list[tuple[str, bytes | None]] | None = None,
    ) -> Self: ...
    def topic(self) -> str: ...
    def partition(self) -> int: ...
    def offset(self) -> int: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...
    def timestamp(self) -> tuple[int, int]: ...
    def headers(self) -> list[tuple[str, bytes | None]] | None: ...
    def error(self) -> None: ...

def read_ids(
    messages: list[Msg], mac_key: bytes | None = None, accept_v1: bool = False
) -> tuple[
    list[bytes], dict[int, bytes], set[int], dict[int, bytes], dict[int, tuple[tuple[str, bytes | None], ...]]
]:
    """Each message's record id, late marks, ids that do not verify, schema id headers, user
    headers (reference: ``mwcore.runtime.envelope.read_ids``)."""

STRINGS_GENERATION: int  # a Screener keeps at most twice as many recurring strings

@final
class Screener:
    """A chunk of messages made into records or set aside, before user code (reference:
    ``mwcore.runtime.screening.screen``); the short strings that recur in keys and values
    kept as one ``str`` each (``serde/strings.rs``)."""

    def __new__(
        cls,
        record: type,
        serialization_error: type[BaseException],
        key_error: Callable[[bytes | None], BaseException],
        with_schema_id: Callable[[bytes, bytes], bytes],
        min_ts: int,
        max_ts: int,
        max_key: int,
    ) -> Self: ...
    def screen(
        self,
        messages: list[Msg],
        rids: list[bytes],
        dup: list[bool] | None,
        forged: set[int],
        lates: dict[int, bytes],
        schema_ids: dict[int, bytes],
        headers: dict[int, tuple[tuple[str, bytes | None], ...]],
        batch_seen: set[bytes],
        bindings: dict[str, tuple[str, Callable[[bytes], Any]]],
    ) -> tuple[int, list[tuple[int, str]], list[Any], set[str]]: ...

@final
class GroupConsumer:
    """A worker's group membership and input on librdkafka (reference:
    ``mwcore.transport.consumer.GroupConsumer``; wrapped by ``mwcore.cores.native.consumer``)."""

    def __new__(
        cls,
        config: dict[str, str],
        on_committed: Callable[[str | None, list[tuple[str, int, int, str | None]]], None] | None = None,
        batch_poll: bool = False,
    ) -> Self: ...
    def subscribe(
        self,
        topics: list[str],
        on_assign: Callable[[list[tuple[str, int]]], Any],
        on_revoke: Callable[[list[tuple[str, int]]], None],
        on_lost: Callable[[list[tuple[str, int]]], None],
    ) -> None: ...
    def assignment(self) -> list[tuple[str, int]]: ...
    def poll(self, max_messages: int, timeout: float) -> tuple[list[Msg], list[tuple[int, str]]]: ...
    def pause(self, parts: list[tuple[str, int]]) -> None: ...
    def resume(self, parts: list[tuple[str, int]]) -> None: ...
    def seek(self, topic: str, partition: int, offset: int) -> None: ...
    def end_offset(self, topic: str, partition: int, cached: bool, timeout: float) -> int: ...
    def position(self, topic: str, partition: int) -> int: ...
    def committed(
        self, parts: list[tuple[str, int]], timeout: float
    ) -> list[tuple[str, int, int, str | None]]: ...
    def commit(self, offsets: list[tuple[str, int, int, str | None]], asynchronous: bool) -> None: ...
    def group_metadata(self) -> bytes: ...
    def close(self) -> None: ...

@final
class TimerQueue:
    """An interval's pending timers (reference: ``mwcore.runtime.timers.TimerQueue``)."""

    def __new__(cls, entry: type, domains: tuple[Any, Any, Any]) -> Self: ...
    def __len__(self) -> int: ...
    def set(self, entry: Any) -> None: ...
    def clear(self, key: str, tag: str) -> bool: ...
    def clear_all(self) -> None: ...
    def oldest(self, domain: Any) -> int | None: ...
    def pop_due(self, domain: Any, limit: int) -> Any | None: ...

@final
class Context:
    """The context user code gets on the native core (reference: ``mwcore.api.context.Context``)."""

    @property
    def key(self) -> str: ...
    @property
    def state(self) -> StateHandle | None: ...
    @property
    def timers(self) -> TimerHandle | None: ...
    def now_ms(self) -> Any: ...
    def produce(
        self, stream: Any, value: Any, timestamp: Any, key: str | None = None, headers: Any = None
    ) -> None: ...

@final
class StateHandle:
    """``ctx.state`` (reference: ``mwcore.api.context.StateHandle``)."""

    def get(self, default: Any = None) -> Any: ...
    def set(self, value: Any) -> None: ...
    def clear(self) -> None: ...

@final
class TimerHandle:
    """``ctx.timers`` (reference: ``mwcore.api.context.TimerHandle``)."""

    def set(self, tag: str, timestamp: Any, domain: Any = None) -> None: ...
    def clear(self, tag: str) -> None: ...

@final
class Applier:
    """User code run on a chunk of records or on due timers, its effects applied
    (reference: ``mwcore.runtime.effects.Applier``, its path when not careful)."""

    def __new__(
        cls,
        process_record: Callable[[Any, Any], None],
        process_timer: Callable[[Any, Any], None],
        values: dict[str, Any],
        cache_get: Callable[[str], Any],
        dirty: dict[str, None],
        timers: TimerQueue,
        undo: Callable[[str, Exception, dict[bytes, bytes | None]], None],
        delete_fired: bool,
        encoders: dict[str, tuple[str, Callable[[Any], bytes]]],
        clock: Callable[[], int],
        kinds: tuple[type, type, type, tuple[Any, Any, Any]],
    ) -> Self: ...
    @property
    def ctx(self) -> Context: ...
    def records(
        self,
        items: list[Any],
        state: dict[bytes, bytes | None],
        timers: dict[bytes, bytes | None],
        out: list[Production],
        seen: dict[bytes, int],
        latency: tuple[list[int], list[int], int] | None,
        fault_at: int,
        fault: Callable[[], None],
        bad: Callable[[int, BaseException], None],
        failed: Callable[[Any, Exception], None],
    ) -> int: ...
    def fire(
        self,
        domain: Any,
        limit_ts: int,
        state: dict[bytes, bytes | None],
        timers: dict[bytes, bytes | None],
        out: list[Production],
        failed: Callable[[Any, bytes, Exception], None],
        max_firings: int | None = None,
        before: Callable[[], None] | None = None,
    ) -> int: ...
    def take_late(self) -> int: ...
    def encode_dirty(
        self,
        state: dict[bytes, bytes | None],
        encode: Callable[[Any], bytes],
        first_try: tuple[Callable[[Any, int], bytes], int] | None,
    ) -> tuple[str, Exception] | None: ...
