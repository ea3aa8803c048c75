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

/// A consumed message's parts but its topic, as Rust holds them.
pub struct Body {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub timestamp: (i32, i64),
    headers: Option<Vec<(String, Option<Vec<u8>>)>>,
    pub marks: Marks,
}

impl Body {
    /// The marks are read off `headers` (each `(name, value)`).
    fn new(
        partition: i32,
        offset: i64,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        timestamp: (i32, i64),
        headers: Option<Vec<(String, Option<Vec<u8>>)>>,
    ) -> Body {
        let mut marks = Marks::default();
        for (name, v) in headers.iter().flatten() {
            marks.note(name, v.as_deref());
        }
        Body {
            partition,
            offset,
            key,
            value,
            timestamp,
            headers,
            marks,
        }
    }
}

/// One consumed message, with the methods the runtime reads. Its key, value and headers
/// stay Rust's until Python asks for them (the record path reads them in Rust).
#[pyclass(module = "mwcore_native", frozen)]
pub struct Msg {
    pub topic: Py<PyString>,
    pub body: Body,
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
        Msg {
            topic: topic.unbind(),
            body: Body::new(partition, offset, key, value, timestamp, headers),
        }
    }

    fn topic(&self, py: Python<'_>) -> Py<PyString> {
        self.topic.clone_ref(py)
    }
    fn partition(&self) -> i32 {
        self.body.partition
    }
    fn offset(&self) -> i64 {
        self.body.offset
    }
    fn key<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.body.key.as_deref().map(|k| PyBytes::new(py, k))
    }
    fn value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.body.value.as_deref().map(|v| PyBytes::new(py, v))
    }
    fn timestamp(&self) -> (i32, i64) {
        self.body.timestamp
    }
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(hs) = &self.body.headers else {
            return Ok(None);
        };
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
/// of each part, where `OwnedMessage::detach` and then a `Msg` would make two).
pub struct Taken {
    pub topic: String,
    body: Body,
}

impl Taken {
    pub fn of<M: Message>(m: &M) -> Taken {
        let headers = m.headers().map(|hs| {
            hs.iter()
                .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                .collect()
        });
        let timestamp = match m.timestamp() {
            Timestamp::NotAvailable => (0, -1),
            Timestamp::CreateTime(t) => (1, t),
            Timestamp::LogAppendTime(t) => (2, t),
        };
        Taken {
            topic: m.topic().to_owned(),
            body: Body::new(
                m.partition(),
                m.offset(),
                m.key().map(<[u8]>::to_vec),
                m.payload().map(<[u8]>::to_vec),
                timestamp,
                headers,
            ),
        }
    }

    /// The Python side, its topic given (one `str` per topic, shared).
    pub fn into_msg(self, py: Python<'_>, topic: Py<PyString>) -> PyResult<Py<Msg>> {
        Py::new(
            py,
            Msg {
                topic,
                body: self.body,
            },
        )
    }
}
