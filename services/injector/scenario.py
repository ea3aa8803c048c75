"""What the traffic generator makes: queries with skewed popularity and languages, a
daily rhythm, jittered (out-of-order) timestamps, and scripted spikes and dips.

Pure: given a scenario and a second, ``Traffic.second(s)`` returns that second's
records; ``Traffic.truth`` lists the scripted anomalies, with the queries one can
expect a detector to find (those whose expected count is high enough to tell).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

LANGUAGES = ("en", "de", "fr", "es", "ja", "pt")
WORDS = (
    "weather",
    "news",
    "football",
    "music",
    "recipe",
    "movie",
    "train",
    "flight",
    "hotel",
    "election",
    "stocks",
    "earthquake",
    "concert",
    "festival",
    "traffic",
    "lottery",
    "series",
    "game",
    "phone",
)


@dataclass(frozen=True)
class Event:
    """A scripted anomaly: queries (or a whole language) spike or dip for a while."""

    kind: str  # "SPIKE" | "DIP"
    start_s: int  # seconds after the scenario's start
    seconds: int
    factor: float  # rate multiplier: 0 for a dip to silence, 8 for a spike
    query: str | None = None  # one query ...
    lang: str | None = None  # ... or every query of a language


@dataclass(frozen=True)
class Scenario:
    seed: int = 1
    queries: int = 300
    rate: float = 2000.0  # records per second at the rhythm's mean
    zipf: float = 1.1
    day_s: int = 600  # a compressed day: the rhythm's period
    rhythm: float = 0.4  # the rhythm's amplitude, 0..1
    sharpness: float = 0.0  # 0: a sine; larger: steeper rises and falls (tanh-shaped)
    jitter_ms: int = 1000  # a record is at most this much older than its file's second
    warmup_s: int = 30  # no anomalies before this
    events: tuple[Event, ...] | None = None  # None: a default script (see ``default_events``)
    min_detectable: float = 5.0  # expected count per second a detector needs to see a dip


@dataclass(frozen=True)
class QueryInfo:
    query: str
    lang: str
    share: float  # fraction of all traffic


@dataclass
class Traffic:
    scenario: Scenario
    start_ms: int
    infos: list[QueryInfo] = field(init=False)
    events: tuple[Event, ...] = field(init=False)

    def __post_init__(self) -> None:
        sc = self.scenario
        rng = np.random.default_rng(sc.seed)
        weights = 1.0 / np.arange(1, sc.queries + 1) ** sc.zipf
        weights /= weights.sum()
        infos = []
        for i in range(sc.queries):
            lang = LANGUAGES[int(rng.integers(len(LANGUAGES)))] if i >= len(LANGUAGES) else LANGUAGES[i]
            word = WORDS[i % len(WORDS)]
            infos.append(QueryInfo(f"{lang}:{word}-{i}", lang, float(weights[i])))
        self.infos = infos
        self.events = sc.events if sc.events is not None else default_events(self)

    def multiplier(self, second: int) -> float:
        sc = self.scenario
        wave = math.sin(2 * math.pi * second / sc.day_s)
        if sc.sharpness > 0:  # a day and a night with quick mornings and evenings
            wave = math.tanh(sc.sharpness * wave) / math.tanh(sc.sharpness)
        return 1.0 + sc.rhythm * wave

    def expected(self, info: QueryInfo, second: int) -> float:
        """Expected count of ``info`` in ``second`` without scripted events."""
        return self.scenario.rate * self.multiplier(second) * info.share

    def _factor(self, info: QueryInfo, second: int) -> float:
        f = 1.0
        for e in self.events:
            if e.start_s <= second < e.start_s + e.seconds and (e.query == info.query or e.lang == info.lang):
                f *= e.factor
        return f

    def second(self, second: int) -> list[tuple[int, str, str, int]]:
        """Records (timestamp ms, query, lang, user) of one second of the scenario:
        their nominal second is ``start + second``; each is up to ``jitter_ms`` older."""
        sc = self.scenario
        rng = np.random.default_rng((sc.seed, second))
        lam = np.array([self.expected(i, second) * self._factor(i, second) for i in self.infos])
        counts = rng.poisson(lam)
        base = self.start_ms + second * 1000
        out: list[tuple[int, str, str, int]] = []
        for info, n in zip(self.infos, counts.tolist(), strict=True):
            if not n:
                continue
            offsets = rng.integers(0, 1000, n)
            lag = np.minimum(rng.exponential(sc.jitter_ms / 8, n), sc.jitter_ms).astype(np.int64)
            users = rng.integers(0, 1_000_000, n)
            for off, lg, user in zip(offsets.tolist(), lag.tolist(), users.tolist(), strict=True):
                out.append((base + off - lg, info.query, info.lang, user))
        order = rng.permutation(len(out))
        return [out[i] for i in order.tolist()]

    def truth(self) -> list[dict[str, object]]:
        """Each scripted anomaly, per query a detector can be expected to find."""
        rows = []
        for e in self.events:
            for info in self.infos:
                if e.query != info.query and e.lang != info.lang:
                    continue
                expected = self.expected(info, e.start_s)
                detectable = expected >= (self.scenario.min_detectable if e.kind == "DIP" else 1.0)
                rows.append(
                    {
                        "kind": e.kind,
                        "query": info.query,
                        "lang": info.lang,
                        "start": self.start_ms + e.start_s * 1000,
                        "end": self.start_ms + (e.start_s + e.seconds) * 1000,
                        "expected": round(expected, 2),
                        "detectable": detectable,
                    }
                )
        return rows


def default_events(traffic: Traffic) -> tuple[Event, ...]:
    """Every 40 s after the warm-up, in turn: a spike of a mid-popular query, a whole
    language going silent, a spike of a less popular one (for an hour of scenario)."""
    sc = traffic.scenario
    by_lang: dict[str, list[QueryInfo]] = {}
    for info in traffic.infos:
        by_lang.setdefault(info.lang, []).append(info)
    events: list[Event] = []
    t = sc.warmup_s + 10
    i = 0
    while t < 3600:
        kind = i % 3
        if kind == 0:
            q = traffic.infos[(10 + (i * 7) % 30) % len(traffic.infos)]
            events.append(Event("SPIKE", t, 8, 8.0, query=q.query))
        elif kind == 1:
            lang = LANGUAGES[1 + (i // 3) % (len(LANGUAGES) - 1)]
            events.append(Event("DIP", t, 10, 0.0, lang=lang))
        else:
            q = traffic.infos[(40 + (i * 11) % 60) % len(traffic.infos)]
            events.append(Event("SPIKE", t, 6, 10.0, query=q.query))
        t += 40
        i += 1
    return tuple(events)
