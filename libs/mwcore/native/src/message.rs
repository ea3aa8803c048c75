//! A consumed message as the runtime reads it (`topic()`, `partition()`, `offset()`,
//! `key()`, `value()`, `timestamp()`, `headers()`, `error()`: the methods it calls on
//! confluent-kafka's), built once per message from librdkafka's. The three headers the
//! record path reads (`mw-id`, `mw-mac`, `mw-late-ms`) are kept apart as well, so that
//! `envelope::read_ids` reads them without touching Python objects.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use rdkafka::message::{Headers, Message, Timestamp};

/// The record id's header (`mwcore.api.record.ID_HEADER`).
pub const ID_HEADER: &str = "mw-id";
/// The injector's late mark (`mwcore.api.record.LATE_HEADER`).
pub const LATE_HEADER: &str = "mw-late-ms";
/// The id's MAC (`mwcore.api.signing.MAC_HEADER`).
pub const MAC_HEADER: &str = "mw-mac";

/// One header as the record path reads it: absent, present without a value, or bytes.
/// As in the Python reference, the last of several headers of one name counts.
pub type Header = Option<Option<Vec<u8>>>;

/// The headers the record path reads, taken once from all of a message's headers.
#[derive(Default)]
pub struct Marks {
    pub id: Header,
    pub mac: Header,
    pub late: Header,
}

impl Marks {
    fn note(&mut self, name: &str, value: Option<&[u8]>) {
        let slot = match name {
            ID_HEADER => &mut self.id,
            LATE_HEADER => &mut self.late,
            MAC_HEADER => &mut self.mac,
            _ => return,
        };
        *slot = Some(value.map(<[u8]>::to_vec));
    }
}

/// One consumed message, with the methods the runtime reads. Its key, value and headers
/// stay Rust's until Python asks for them (the record path reads them in Rust).
#[pyclass(module = "mwcore_native", frozen)]
pub struct Msg {
    pub topic: Py<PyString>,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp: (i32, i64),
    headers: Option<Vec<(String, Option<Vec<u8>>)>>,
    pub marks: Marks,
}

#[pymethods]
impl Msg {
    /// A message made in Python (tests): the fields confluent-kafka's `Message` has,
    /// `headers` a list of `(name, bytes | None)`.
    #[new]
    #[pyo3(signature = (topic, partition, offset, key, value, timestamp, headers=None))]
    fn py_new(
        topic: Bound<'_, PyString>,
        partition: i32,
        offset: i64,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        timestamp: (i32, i64),
        headers: Option<Vec<(String, Option<Vec<u8>>)>>,
    ) -> Self {
        let mut marks = Marks::default();
        for (name, value) in headers.iter().flatten() {
            marks.note(name, value.as_deref());
        }
        Msg {
            topic: topic.unbind(),
            partition,
            offset,
            key,
            value,
            timestamp,
            headers,
            marks,
        }
    }

    fn topic(&self, py: Python<'_>) -> Py<PyString> {
        self.topic.clone_ref(py)
    }
    fn partition(&self) -> i32 {
        self.partition
    }
    fn offset(&self) -> i64 {
        self.offset
    }
    fn key<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.key.as_deref().map(|k| PyBytes::new(py, k))
    }
    fn value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.value.as_deref().map(|v| PyBytes::new(py, v))
    }
    fn timestamp(&self) -> (i32, i64) {
        self.timestamp
    }
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(hs) = &self.headers else { return Ok(None) };
        let list = PyList::empty(py);
        for (name, value) in hs {
            list.append((
                PyString::new(py, name),
                value.as_deref().map(|v| PyBytes::new(py, v)),
            ))?;
        }
        Ok(Some(list))
    }
    fn error(&self) -> Option<PyObject> {
        None
    }
}

/// A consumed message's parts, taken from librdkafka's message without the GIL (one copy
/// of each part, where `OwnedMessage::detach` and then `Msg` would make two).
pub struct Taken {
    pub topic: String,
    msg: Msg0,
}

/// A `Msg` but its topic.
struct Msg0 {
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    timestamp: (i32, i64),
    headers: Option<Vec<(String, Option<Vec<u8>>)>>,
    marks: Marks,
}

impl Taken {
    pub fn of<M: Message>(m: &M) -> Taken {
        let mut marks = Marks::default();
        let headers = m.headers().map(|hs| {
            hs.iter()
                .map(|h| {
                    marks.note(h.key, h.value);
                    (h.key.to_owned(), h.value.map(<[u8]>::to_vec))
                })
                .collect()
        });
        let timestamp = match m.timestamp() {
            Timestamp::NotAvailable => (0, -1),
            Timestamp::CreateTime(t) => (1, t),
            Timestamp::LogAppendTime(t) => (2, t),
        };
        Taken {
            topic: m.topic().to_owned(),
            msg: Msg0 {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                timestamp,
                headers,
                marks,
            },
        }
    }

    /// The Python side, its topic given (one `str` per topic, shared).
    pub fn into_msg(self, py: Python<'_>, topic: Py<PyString>) -> PyResult<Py<Msg>> {
        let m = self.msg;
        Py::new(
            py,
            Msg {
                topic,
                partition: m.partition,
                offset: m.offset,
                key: m.key,
                value: m.value,
                timestamp: m.timestamp,
                headers: m.headers,
                marks: m.marks,
            },
        )
    }
}
