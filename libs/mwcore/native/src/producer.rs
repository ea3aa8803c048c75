//! Sending the worker's productions (reference: `mwcore.transport.producer.Sender`,
//! with one delivery callback per production into its `OutboxBatch`).
//!
//! Productions go out a batch at a time (one crossing per batch); librdkafka's
//! delivery reports are tallied per batch here, and a batch is handed back (by `poll`
//! or `flush`) once every production of it is reported: the partitions' ends and
//! counts it reached, and each failure with its error code, topic, key and value.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{
    BaseProducer, BaseRecord, DeliveryResult, Producer as _, ProducerContext, PurgeConfig,
};
use rdkafka::ClientContext;

/// How long `flush` sleeps between looks at the reports.
const FLUSH_STEP: Duration = Duration::from_millis(1);

type Part = (String, i32);
type Failure = (i32, String, Option<Vec<u8>>, Option<Vec<u8>>); // code, topic, key, value

#[derive(Default)]
struct Tally {
    remaining: usize,
    ends: HashMap<Part, i64>,
    counts: HashMap<Part, i64>,
    failures: Vec<Failure>,
}

#[derive(Default)]
struct Reports {
    open: HashMap<u64, Tally>,
    settled: Vec<(u64, Tally)>,
}

impl Reports {
    fn report(&mut self, batch: u64, outcome: Result<Part, Failure>, offset: i64) {
        let Some(tally) = self.open.get_mut(&batch) else {
            return;
        };
        match outcome {
            Ok(part) => {
                let end = tally.ends.entry(part.clone()).or_insert(0);
                *end = (*end).max(offset + 1);
                *tally.counts.entry(part).or_insert(0) += 1;
            }
            Err(failure) => tally.failures.push(failure),
        }
        tally.remaining -= 1;
        if tally.remaining == 0 {
            let done = self.open.remove(&batch).expect("open");
            self.settled.push((batch, done));
        }
    }
}

struct Tallying {
    reports: Mutex<Reports>,
}

impl ClientContext for Tallying {}

fn code_of(err: &KafkaError) -> i32 {
    err.rdkafka_error_code().map_or(-1, |c| c as i32)
}

impl ProducerContext for Tallying {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, batch: usize) {
        let mut reports = self.reports.lock().expect("reports");
        match result {
            Ok(m) => reports.report(
                batch as u64,
                Ok((m.topic().to_owned(), m.partition())),
                m.offset(),
            ),
            Err((err, m)) => {
                let failure = (
                    code_of(err),
                    m.topic().to_owned(),
                    m.key().map(<[u8]>::to_vec),
                    m.payload().map(<[u8]>::to_vec),
                );
                reports.report(batch as u64, Err(failure), 0);
            }
        }
    }
}

fn bytes_or_text(v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u8>>> {
    if v.is_none() {
        Ok(None)
    } else if let Ok(s) = v.downcast::<PyString>() {
        Ok(Some(s.to_str()?.as_bytes().to_vec()))
    } else {
        Ok(Some(v.downcast::<PyBytes>()?.as_bytes().to_vec()))
    }
}

fn add_headers(mut headers: OwnedHeaders, pairs: &Bound<'_, PyAny>) -> PyResult<OwnedHeaders> {
    for pair in pairs.try_iter()? {
        let pair = pair?;
        let pair = pair.downcast::<PyTuple>()?;
        let name = pair.get_item(0)?;
        let name = name.downcast::<PyString>()?.to_str()?.to_owned();
        let value = bytes_or_text(&pair.get_item(1)?)?;
        headers = headers.insert(Header {
            key: &name,
            value: value.as_deref(),
        });
    }
    Ok(headers)
}

/// A producer of the worker's productions, reported per batch.
#[pyclass(module = "mwcore_native")]
pub struct Producer {
    inner: BaseProducer<Tallying>,
}

impl Producer {
    /// Serve the delivery reports already queued, without waiting (rdkafka's `poll`
    /// serves one event a call).
    fn serve_ready(&self) {
        loop {
            let before = self.inner.in_flight_count();
            self.inner.poll(Duration::ZERO);
            if self.inner.in_flight_count() == before {
                return;
            }
        }
    }

    fn settled<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let settled = std::mem::take(&mut self.inner.context().reports.lock().expect("reports").settled);
        let out = PyList::empty(py);
        for (batch, tally) in settled {
            let ends = PyDict::new(py);
            for ((topic, partition), end) in tally.ends {
                ends.set_item((topic, partition), end)?;
            }
            let counts = PyDict::new(py);
            for ((topic, partition), n) in tally.counts {
                counts.set_item((topic, partition), n)?;
            }
            let failures = PyList::empty(py);
            for (code, topic, key, value) in tally.failures {
                let key = key.map(|k| PyBytes::new(py, &k));
                let value = value.map(|v| PyBytes::new(py, &v));
                failures.append((code, topic, key, value))?;
            }
            out.append((batch, ends, counts, failures))?;
        }
        Ok(out)
    }
}

#[pymethods]
impl Producer {
    /// A producer with librdkafka's `config` (every value as a string).
    #[new]
    fn new(config: &Bound<'_, PyDict>) -> PyResult<Self> {
        let mut conf = ClientConfig::new();
        for (k, v) in config.iter() {
            conf.set(k.extract::<String>()?, v.extract::<String>()?);
        }
        let context = Tallying {
            reports: Mutex::new(Reports::default()),
        };
        let inner = conf
            .create_with_context(context)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(Producer { inner })
    }

    /// Queue `batch`'s productions, each with `id_header` (its id; None: no such header), then `extra`
    /// headers, its MAC under `mac_header` (when `macs` are given) and its own headers.
    /// A production the client refuses outright counts as failed with its code.
    #[allow(clippy::too_many_arguments)]
    fn send_all(
        &self,
        py: Python<'_>,
        batch: u64,
        productions: &Bound<'_, PyList>,
        id_header: Option<&str>,
        extra: &Bound<'_, PyAny>,
        mac_header: &str,
        macs: Option<&Bound<'_, PyList>>,
    ) -> PyResult<usize> {
        let n = productions.len();
        if n == 0 {
            return Ok(0);
        }
        self.inner.context().reports.lock().expect("reports").open.insert(
            batch,
            Tally {
                remaining: n,
                ..Tally::default()
            },
        );
        for (i, p) in productions.iter().enumerate() {
            let p = p.downcast::<PyTuple>()?; // a Production
            let id = p.get_item(0)?;
            let id = id.downcast::<PyBytes>()?.as_bytes();
            let topic: String = p.get_item(1)?.extract()?;
            let key = bytes_or_text(&p.get_item(2)?)?;
            let value = bytes_or_text(&p.get_item(3)?)?;
            let timestamp: i64 = p.get_item(4)?.extract()?;
            let mut headers = OwnedHeaders::new();
            if let Some(name) = id_header {
                headers = headers.insert(Header {
                    key: name,
                    value: Some(id),
                });
            }
            headers = add_headers(headers, extra)?;
            if let Some(macs) = macs {
                let mac = macs.get_item(i)?;
                headers = headers.insert(Header {
                    key: mac_header,
                    value: Some(mac.downcast::<PyBytes>()?.as_bytes()),
                });
            }
            let own = p.get_item(5)?;
            if !own.is_none() {
                headers = add_headers(headers, &own)?;
            }
            let mut record = BaseRecord::with_opaque_to(&topic, batch as usize)
                .timestamp(timestamp)
                .headers(headers);
            if let Some(k) = key.as_deref() {
                record = record.key(k);
            }
            if let Some(v) = value.as_deref() {
                record = record.payload(v);
            }
            loop {
                match self.inner.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        py.allow_threads(|| self.inner.poll(Duration::from_millis(50)));
                    }
                    Err((err, _)) => {
                        let failure = (code_of(&err), topic.clone(), key.clone(), value.clone());
                        self.inner
                            .context()
                            .reports
                            .lock()
                            .expect("reports")
                            .report(batch, Err(failure), 0);
                        break;
                    }
                }
            }
        }
        Ok(n)
    }

    /// Serve delivery reports (rdkafka's `poll`: one event, or those that come within
    /// `timeout` seconds); the batches settled since: `(batch, ends, counts, failures)`
    /// each. (Serving every event already in, as `flush` does, cost the windowed
    /// workload a sixth of its rate in a same-run A/B: docs/benchmarks.md.)
    fn poll<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<Bound<'py, PyList>> {
        py.allow_threads(|| self.inner.poll(Duration::from_secs_f64(timeout.max(0.0))));
        self.settled(py)
    }

    /// Wait until everything queued is reported or `timeout` seconds pass: how many
    /// are left, and the batches settled. (rdkafka's own `flush` serves reports in
    /// spans of 100 ms, so a hand-over waited that long for acknowledgements that had
    /// come in the first millisecond.)
    fn flush<'py>(&self, py: Python<'py>, timeout: f64) -> PyResult<(i32, Bound<'py, PyList>)> {
        let deadline = Instant::now() + Duration::from_secs_f64(timeout.max(0.0));
        py.allow_threads(|| loop {
            self.serve_ready();
            let now = Instant::now();
            if self.inner.in_flight_count() == 0 || now >= deadline {
                break;
            }
            // (not rdkafka's `poll(1 ms)`: it would ask librdkafka to wait the whole
            // milliseconds left, none, and spin until its deadline)
            std::thread::sleep((deadline - now).min(FLUSH_STEP));
        });
        Ok((self.inner.in_flight_count(), self.settled(py)?))
    }

    /// Stop sending what is queued or waiting for the broker's answer: each such
    /// production is reported failed (librdkafka's `_PURGE_QUEUE`, `_PURGE_INFLIGHT`) and
    /// never retried; a request already sent may still be written. The batches settled.
    fn purge<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        py.allow_threads(|| {
            self.inner.purge(PurgeConfig::default().queue().inflight());
            self.serve_ready();
        });
        self.settled(py)
    }
}
