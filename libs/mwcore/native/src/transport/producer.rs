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
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer as _, ProducerContext, PurgeConfig};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{bindings, ClientContext};

use crate::api::signing::{id_mac, record_mac};
use crate::transport::produce::{produce, Headers, Topics};

/// How long `flush` sleeps between looks at the reports.
const FLUSH_STEP: Duration = Duration::from_millis(1);

type Failure = (i32, String, Option<Vec<u8>>, Option<Vec<u8>>); // code, topic, key, value

/// Per partition a batch reached: the end (one past its last offset) and how many.
type Reached = HashMap<String, HashMap<i32, (i64, i64)>>; // topic -> partition -> (end, count)

#[derive(Default)]
struct Tally {
    remaining: usize,
    reached: Reached, // by topic first: a report looks its topic up without copying it
    failures: Vec<Failure>,
}

#[derive(Default)]
struct Reports {
    open: HashMap<u64, Tally>,
    settled: Vec<(u64, Tally)>,
}

impl Reports {
    fn report(&mut self, batch: u64, outcome: Result<(&str, i32), Failure>, offset: i64) {
        let Some(tally) = self.open.get_mut(&batch) else {
            return;
        };
        match outcome {
            Ok((topic, partition)) => {
                let parts = match tally.reached.get_mut(topic) {
                    Some(parts) => parts,
                    None => tally.reached.entry(topic.to_owned()).or_default(),
                };
                let (end, count) = parts.entry(partition).or_insert((0, 0));
                *end = (*end).max(offset + 1);
                *count += 1;
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
            Ok(m) => reports.report(batch as u64, Ok((m.topic(), m.partition())), m.offset()),
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

/// A key, value or header value as the bytes to send: a `bytes`' own, or a `str`'s
/// UTF-8 (kept by the `str`); None for None. Borrowed: nothing copied until librdkafka
/// copies it.
fn bytes_or_text<'a>(v: &'a Bound<'_, PyAny>) -> PyResult<Option<&'a [u8]>> {
    if v.is_none() {
        Ok(None)
    } else if let Ok(s) = v.downcast::<PyString>() {
        Ok(Some(s.to_str()?.as_bytes()))
    } else {
        Ok(Some(v.downcast::<PyBytes>()?.as_bytes()))
    }
}

fn add_headers(headers: &mut Headers, pairs: &Bound<'_, PyAny>) -> PyResult<()> {
    for pair in pairs.try_iter()? {
        let pair = pair?;
        let pair = pair.downcast::<PyTuple>()?;
        let (name, value) = (pair.get_item(0)?, pair.get_item(1)?);
        headers.add(name.downcast::<PyString>()?.to_str()?, bytes_or_text(&value)?);
    }
    Ok(())
}

/// A producer of the worker's productions, reported per batch.
#[pyclass(module = "mwcore_native")]
pub struct Producer {
    topics: Mutex<Topics>, // first: its handles are destroyed before the producer
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
            let counts = PyDict::new(py);
            for (topic, parts) in tally.reached {
                let topic = PyString::new(py, &topic);
                for (partition, (end, count)) in parts {
                    ends.set_item((&topic, partition), end)?;
                    counts.set_item((&topic, partition), count)?;
                }
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
        Ok(Producer {
            topics: Mutex::default(),
            inner,
        })
    }

    /// Queue `batch`'s productions, each with `id_header` (its id; None: no such header), then `extra`
    /// headers, its MAC under `mac_header` (with `mac_key`, the pipeline secret's: version 2,
    /// or version 1 where `mac_v1`; `mwcore.api.signing.Signer.sign_production`) and its own headers.
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
        mac_key: Option<&[u8]>,
        mac_v1: bool,
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
        let rk = self.inner.client().native_ptr();
        let mut last: Option<(Bound<'_, PyAny>, *mut bindings::rd_kafka_topic_t)> = None;
        for p in productions.iter() {
            let p = p.downcast::<PyTuple>()?; // a Production
            let id = p.get_item(0)?;
            let id = id.downcast::<PyBytes>()?.as_bytes();
            let topic_obj = p.get_item(1)?;
            let topic = topic_obj.downcast::<PyString>()?.to_str()?;
            let rkt = match &last {
                Some((t, rkt)) if t.is(&topic_obj) => Ok(*rkt), // a batch's productions share their topic
                _ => {
                    // (not held across the waits below: another thread's send_all, holding
                    // the GIL, would wait for it while this one waits for the GIL)
                    let rkt = self.topics.lock().expect("topics").handle(rk, topic);
                    if let Ok(handle) = rkt {
                        last = Some((topic_obj.clone(), handle));
                    }
                    rkt
                }
            };
            let (key, value) = (p.get_item(2)?, p.get_item(3)?);
            let (key, value) = (bytes_or_text(&key)?, bytes_or_text(&value)?);
            let timestamp: i64 = p.get_item(4)?.extract()?;
            let mut headers = Headers::new();
            if let Some(name) = id_header {
                headers.add(name, Some(id));
            }
            add_headers(&mut headers, extra)?;
            if let Some(secret) = mac_key {
                let mac = if mac_v1 {
                    id_mac(secret, id)
                } else {
                    record_mac(secret, id, topic.as_bytes(), key, value.unwrap_or(b""))
                };
                headers.add(mac_header, Some(&mac));
            }
            let own = p.get_item(5)?;
            if !own.is_none() {
                add_headers(&mut headers, &own)?;
            }
            loop {
                let sent = rkt.and_then(|rkt| produce(rk, rkt, key, value, timestamp, &mut headers, batch));
                match sent {
                    Ok(()) => break,
                    Err(RDKafkaRespErr::RD_KAFKA_RESP_ERR__QUEUE_FULL) => {
                        py.allow_threads(|| self.inner.poll(Duration::from_millis(50)));
                    }
                    Err(code) => {
                        let code = RDKafkaErrorCode::from(code) as i32;
                        let failure = (
                            code,
                            topic.to_owned(),
                            key.map(<[u8]>::to_vec),
                            value.map(<[u8]>::to_vec),
                        );
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
    /// workload a sixth of its rate in a same-run A/B: CHANGELOG.md, measured history.)
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
