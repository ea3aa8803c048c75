"""``zeitgeist.Anomaly`` version 2 (``phase``) rolls out in either order: the kit's
upgrade check accepts it beside version 1, a version 1 reader reads version 2 records
(the phase skipped), and a version 2 reader reads version 1 records as ``OPEN``."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest

from mwcore.serde.compat import upgrade_refusal
from tests.conftest import ROOT

# Version 1, as it was before the detector reported episodes.
V1: dict[str, Any] = {
    "type": "record",
    "name": "Anomaly",
    "namespace": "zeitgeist",
    "fields": [
        {"name": "query", "type": "string"},
        {"name": "lang", "type": "string"},
        {"name": "kind", "type": {"type": "enum", "name": "AnomalyKind", "symbols": ["SPIKE", "DIP"]}},
        {"name": "start", "type": "long"},
        {"name": "detected_bucket", "type": "long"},
        {"name": "expected", "type": "double"},
        {"name": "observed", "type": "double"},
        {"name": "confidence", "type": "double"},
    ],
}
V2: dict[str, Any] = json.loads((ROOT / "schemas" / "zeitgeist" / "anomaly.avsc").read_text())
RECORD = {
    "query": "en:news-1",
    "lang": "en",
    "kind": "DIP",
    "start": 1_000,
    "detected_bucket": 3_000,
    "expected": 7.5,
    "observed": 0.0,
    "confidence": 0.99999,
}


def _through(record: dict[str, Any], writer: dict[str, Any], reader: dict[str, Any]) -> dict[str, Any]:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(writer), record)
    buf.seek(0)
    out: dict[str, Any] = fastavro.schemaless_reader(
        buf, fastavro.parse_schema(writer), fastavro.parse_schema(reader)
    )
    return out


def test_version_2_is_accepted_beside_version_1() -> None:
    assert V2["version"] == 2
    assert upgrade_refusal("zeitgeist.Anomaly", "v2", V2, "v1", V1) is None


def test_a_version_1_reader_skips_the_phase_and_a_version_2_reader_defaults_it() -> None:
    assert _through({**RECORD, "phase": "CLOSE"}, V2, V1) == RECORD
    assert _through(RECORD, V1, V2) == {**RECORD, "phase": "OPEN"}


@pytest.mark.negative_control
def test_negative_control_a_phase_without_a_default_is_refused() -> None:
    strict = json.loads(json.dumps(V2))
    phase = next(f for f in strict["fields"] if f["name"] == "phase")
    del phase["default"]
    assert upgrade_refusal("zeitgeist.Anomaly", "v2", strict, "v1", V1) is not None
