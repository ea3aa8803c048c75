//! A worker's membership of its consumer group and its input on librdkafka
//! (reference: `mwcore.transport.consumer.GroupConsumer` on confluent-kafka).
//!
//! The group's rebalances call the runtime's Python callbacks from the thread that
//! polls (the GIL taken back for them; `membership.rs`); an exception of a callback is
//! raised by the call that polled. Committed offsets carry the commit witness in their metadata; an
//! asynchronous commit answers on a queue of its own, served by each poll.
//!
//! `poll` takes what has arrived (waiting only for a first message when nothing has)
//! and hands it over in one crossing (with `batch_poll`, from a queue of the fetched
//! messages' own, in one call: `fetched.rs`): messages whose methods are those the runtime
//! reads of confluent-kafka's (`topic()`, `partition()`, `offset()`, `key()`,
//! `value()`, `timestamp()`, `headers()`, `error()`), and the errors met on the way.

use std::collections::HashMap;
use std::ffi::{c_void, CStr, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::transport::commits::{listed, CommitQueue, Committed};
use crate::transport::fetched::{Fetched, Route};
use crate::transport::kafka::{failure, Part};
use crate::transport::membership::{Callbacks, Membership};
use crate::transport::message::Msg;
use crate::transport::polled::{Failed, Polled};
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use rdkafka::bindings;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};

/// How often a poll waiting on its fetched messages serves the group's events.
const EVENTS_EVERY: Duration = Duration::from_millis(10);

fn tpl_of(parts: &[Part]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (topic, partition) in parts {
        tpl.add_partition(topic, *partition);
    }
    tpl
}

/// A group consumer (`GroupConsumer`'s native side).
#[pyclass(module = "mwcore_native")]
pub struct GroupConsumer {
    fetched: Option<Fetched>, // with `batch_poll`; before `inner`: destroyed before the client
    inner: BaseConsumer<Membership>,
    commits: CommitQueue,
    topics: Mutex<HashMap<String, Py<PyString>>>, // one str per topic, shared by its messages
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        // No rebalance while the client closes routes to the queue destroyed before it.
        self.inner.context().route.set(ptr::null_mut());
    }
}

impl GroupConsumer {
    /// Hand the commit answers that have arrived to `on_committed`.
    fn serve_commits(&self, py: Python<'_>) -> PyResult<()> {
        let answers = py.allow_threads(|| self.commits.answers());
        if let Some(cb) = self.inner.context().on_committed.as_ref() {
            for (error, offsets) in answers {
                cb.call1(py, (error, offsets))?;
            }
        }
        Ok(())
    }

    fn raise_kept(&self) -> PyResult<()> {
        match self.inner.context().raised.lock().expect("raised").take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

#[pymethods]
impl GroupConsumer {
    /// A consumer with librdkafka's `config` (every value a string); `on_committed(error,
    /// offsets)` gets what each commit wrote (`(topic, partition, offset, metadata)`);
    /// `batch_poll`: the fetched messages on a queue of their own (`fetched.rs`).
    #[new]
    #[pyo3(signature = (config, on_committed=None, batch_poll=false))]
    fn new(config: &Bound<'_, PyDict>, on_committed: Option<Py<PyAny>>, batch_poll: bool) -> PyResult<Self> {
        let mut conf = ClientConfig::new();
        for (k, v) in config.iter() {
            conf.set(k.extract::<String>()?, v.extract::<String>()?);
        }
        let context = Membership {
            callbacks: Mutex::new(None),
            closing: AtomicBool::new(false),
            on_committed,
            raised: Mutex::new(None),
            route: Route::default(),
        };
        let inner: BaseConsumer<Membership> = conf.create_with_context(context).map_err(|e| failure(&e))?;
        let commits = CommitQueue::new(&inner);
        // SAFETY: the client outlives the queue (field order, and `Drop` clears the route).
        let fetched = batch_poll.then(|| unsafe { Fetched::new(inner.client().native_ptr()) });
        if let Some(f) = &fetched {
            inner.context().route.set(f.ptr());
        }
        Ok(GroupConsumer {
            fetched,
            inner,
            commits,
            topics: Mutex::new(HashMap::new()),
        })
    }

    fn subscribe(
        &self,
        topics: Vec<String>,
        on_assign: Py<PyAny>,
        on_revoke: Py<PyAny>,
        on_lost: Py<PyAny>,
    ) -> PyResult<()> {
        *self.inner.context().callbacks.lock().expect("callbacks") = Some(Callbacks {
            on_assign,
            on_revoke,
            on_lost,
        });
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        self.inner.subscribe(&names).map_err(|e| failure(&e))
    }

    fn assignment(&self) -> PyResult<Vec<Part>> {
        let tpl = self.inner.assignment().map_err(|e| failure(&e))?;
        Ok(tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_owned(), e.partition()))
            .collect())
    }

    /// What has arrived, at once (at most `max_messages`); if nothing has, wait up to
    /// `timeout` seconds for a first message, then take what came with it. Returns the
    /// messages and the errors met, `(code, text)` each.
    fn poll(
        &self,
        py: Python<'_>,
        max_messages: usize,
        timeout: f64,
    ) -> PyResult<(Vec<Py<Msg>>, Vec<Failed>)> {
        let polled = py.allow_threads(|| {
            let mut polled = Polled::default();
            let drain = |polled: &mut Polled| {
                while polled.messages.len() < max_messages {
                    match self.inner.poll(Duration::ZERO) {
                        None => break,
                        Some(Ok(m)) => polled.take(&m),
                        Some(Err(e)) => polled.failed(&e),
                    }
                }
            };
            drain(&mut polled);
            let timeout = Duration::from_secs_f64(timeout.max(0.0));
            if let Some(fetched) = &self.fetched {
                fetched.take(&mut polled, max_messages, 0);
                let deadline = Instant::now() + timeout;
                while polled.messages.is_empty() && polled.errors.is_empty() && max_messages > 0 {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    let ms = left.min(EVENTS_EVERY).as_micros().div_ceil(1000);
                    fetched.take(&mut polled, max_messages, i32::try_from(ms).unwrap_or(i32::MAX));
                    drain(&mut polled); // the group's events meanwhile
                }
            } else if polled.messages.is_empty() && max_messages > 0 {
                match self.inner.poll(timeout) {
                    Some(Ok(m)) => {
                        polled.take(&m);
                        drain(&mut polled);
                    }
                    Some(Err(e)) => polled.failed(&e),
                    None => {}
                }
            }
            polled
        });
        self.raise_kept()?;
        self.serve_commits(py)?;
        polled.into_python(py, &self.topics)
    }

    fn pause(&self, parts: Vec<Part>) -> PyResult<()> {
        self.inner.pause(&tpl_of(&parts)).map_err(|e| failure(&e))
    }

    fn resume(&self, parts: Vec<Part>) -> PyResult<()> {
        self.inner.resume(&tpl_of(&parts)).map_err(|e| failure(&e))
    }

    fn seek(&self, topic: &str, partition: i32, offset: i64) -> PyResult<()> {
        self.inner
            .seek(topic, partition, Offset::from_raw(offset), Duration::ZERO)
            .map_err(|e| failure(&e))
    }

    /// The partition's end (high watermark): as last fetched (`cached`), or asked now.
    fn end_offset(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        cached: bool,
        timeout: f64,
    ) -> PyResult<i64> {
        if cached {
            let name = CString::new(topic).map_err(|e| PyException::new_err(e.to_string()))?;
            let (mut low, mut high) = (-1i64, -1i64);
            let err = unsafe {
                rdkafka::bindings::rd_kafka_get_watermark_offsets(
                    self.inner.client().native_ptr(),
                    name.as_ptr(),
                    partition,
                    &mut low,
                    &mut high,
                )
            };
            if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
                return Err(failure(&KafkaError::MetadataFetch(err.into())));
            }
            return Ok(high);
        }
        py.allow_threads(|| {
            self.inner
                .fetch_watermarks(topic, partition, Duration::from_secs_f64(timeout.max(0.0)))
        })
        .map(|(_, high)| high)
        .map_err(|e| failure(&e))
    }

    /// The next offset this consumer reads from the partition (negative: none yet).
    fn position(&self, topic: &str, partition: i32) -> PyResult<i64> {
        let tpl = self.inner.position().map_err(|e| failure(&e))?;
        Ok(tpl
            .find_partition(topic, partition)
            .and_then(|e| e.offset().to_raw())
            .unwrap_or(-1001))
    }

    /// The group's committed offsets of `parts`: `(topic, partition, offset, metadata)`.
    fn committed(&self, py: Python<'_>, parts: Vec<Part>, timeout: f64) -> PyResult<Vec<Committed>> {
        let tpl = tpl_of(&parts);
        let got = py
            .allow_threads(|| {
                self.inner
                    .committed_offsets(tpl, Duration::from_secs_f64(timeout.max(0.0)))
            })
            .map_err(|e| failure(&e))?;
        // SAFETY: `got` is a live list, read before it is dropped. (Not rdkafka's
        // `elements()`: its `metadata()` panics on metadata that is not UTF-8.)
        Ok(unsafe { listed(got.ptr(), false) })
    }

    /// Commit `offsets` (`(topic, partition, offset, metadata)`); `on_committed` gets
    /// the outcome at a later poll.
    fn commit(&self, py: Python<'_>, offsets: Vec<Committed>, asynchronous: bool) -> PyResult<()> {
        let mut tpl = TopicPartitionList::new();
        for (topic, partition, offset, metadata) in &offsets {
            tpl.add_partition_offset(topic, *partition, Offset::from_raw(*offset))
                .map_err(|e| failure(&e))?;
            if let (Some(m), Some(mut elem)) = (metadata, tpl.find_partition(topic, *partition)) {
                elem.set_metadata(m.as_str());
            }
        }
        if asynchronous {
            return self.commits.commit(&self.inner, &tpl).map_err(|e| failure(&e));
        }
        py.allow_threads(|| self.inner.commit(&tpl, CommitMode::Sync))
            .map_err(|e| failure(&e))
    }

    /// This member's group, generation and member id in librdkafka's serialized form
    /// (`rd_kafka_consumer_group_metadata_write`), as confluent-kafka's
    /// `consumer_group_metadata()` gives them to `send_offsets_to_transaction`.
    fn group_metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        // SAFETY: the client is live for `self`'s life; the metadata and the buffer are
        // freed here, after their bytes are copied.
        unsafe {
            let md = bindings::rd_kafka_consumer_group_metadata(self.inner.client().native_ptr());
            if md.is_null() {
                return Err(PyException::new_err("not a member of a consumer group"));
            }
            let mut buf: *mut c_void = ptr::null_mut();
            let mut size: usize = 0;
            let err = bindings::rd_kafka_consumer_group_metadata_write(md, &mut buf, &mut size);
            bindings::rd_kafka_consumer_group_metadata_destroy(md);
            if !err.is_null() {
                let text = CStr::from_ptr(bindings::rd_kafka_error_string(err))
                    .to_string_lossy()
                    .into_owned();
                bindings::rd_kafka_error_destroy(err);
                return Err(PyException::new_err(text));
            }
            let bytes = PyBytes::new(py, std::slice::from_raw_parts(buf as *const u8, size));
            bindings::rd_kafka_mem_free(ptr::null_mut(), buf);
            Ok(bytes)
        }
    }

    /// Leave the group (revocation callbacks run; an assignment still waiting in the
    /// queue is not taken) and close.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.inner.context().closing.store(true, Ordering::SeqCst);
        py.allow_threads(|| {
            if self.inner.close_queue().is_ok() {
                while !self.inner.closed() {
                    self.inner.poll(Duration::from_millis(100));
                }
            }
        });
        self.raise_kept()
    }
}
