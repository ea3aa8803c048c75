//! A consumed message as the runtime reads it (`topic()`, `partition()`, `offset()`,
//! `key()`, `value()`, `timestamp()`, `headers()`, `error()`: the methods it calls on
//! confluent-kafka's), built once per message from librdkafka's.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use rdkafka::message::{Headers, Message, OwnedMessage, Timestamp};

/// One consumed message, with the methods the runtime reads.
#[pyclass(module = "mwcore_native", frozen)]
pub struct Msg {
    topic: Py<PyString>,
    partition: i32,
    offset: i64,
    key: Option<Py<PyBytes>>,
    value: Option<Py<PyBytes>>,
    timestamp: (i32, i64),
    headers: Option<Py<PyList>>,
}

#[pymethods]
impl Msg {
    fn topic(&self, py: Python<'_>) -> Py<PyString> {
        self.topic.clone_ref(py)
    }
    fn partition(&self) -> i32 {
        self.partition
    }
    fn offset(&self) -> i64 {
        self.offset
    }
    fn key(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.key.as_ref().map(|k| k.clone_ref(py))
    }
    fn value(&self, py: Python<'_>) -> Option<Py<PyBytes>> {
        self.value.as_ref().map(|v| v.clone_ref(py))
    }
    fn timestamp(&self) -> (i32, i64) {
        self.timestamp
    }
    fn headers(&self, py: Python<'_>) -> Option<Py<PyList>> {
        self.headers.as_ref().map(|h| h.clone_ref(py))
    }
    fn error(&self) -> Option<PyObject> {
        None
    }
}

impl Msg {
    /// The Python side of `m`, its topic given (one `str` per topic, shared).
    pub fn new(py: Python<'_>, topic: Py<PyString>, m: &OwnedMessage) -> PyResult<Py<Msg>> {
        let headers = match m.headers() {
            None => None,
            Some(hs) => {
                let list = PyList::empty(py);
                for h in hs.iter() {
                    let value = h.value.map(|v| PyBytes::new(py, v));
                    list.append((PyString::new(py, h.key), value))?;
                }
                Some(list.unbind())
            }
        };
        let timestamp = match m.timestamp() {
            Timestamp::NotAvailable => (0, -1),
            Timestamp::CreateTime(t) => (1, t),
            Timestamp::LogAppendTime(t) => (2, t),
        };
        Py::new(
            py,
            Msg {
                topic,
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(|k| PyBytes::new(py, k).unbind()),
                value: m.payload().map(|v| PyBytes::new(py, v).unbind()),
                timestamp,
                headers,
            },
        )
    }
}
