//! A consumed message as the runtime reads it (`topic()`, `partition()`, `offset()`,
//! `key()`, `value()`, `timestamp()`, `headers()`, `error()`: the methods it calls on
//! confluent-kafka's), built once per message from librdkafka's. The three headers the
//! record path reads (`mw-id`, `mw-mac`, `mw-late-ms`) are kept apart as well, so that
//! `envelope::read_ids` reads them without touching Python objects.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString};
use rdkafka::message::{Headers, Message, Timestamp};
use smallvec::SmallVec;

/// The record id's header (`mwcore.api.record.ID_HEADER`).
pub const ID_HEADER: &str = "mw-id";
/// The injector's late mark (`mwcore.api.record.LATE_HEADER`).
pub const LATE_HEADER: &str = "mw-late-ms";
/// The id's MAC (`mwcore.api.signing.MAC_HEADER`).
pub const MAC_HEADER: &str = "mw-mac";

/// One header as the record path reads it: absent, present without a value, or bytes.
/// As in the Python reference, the last of several headers of one name counts.
pub type Header<'a> = Option<Option<&'a [u8]>>;

/// Where a part lies in a `Body`'s buffer (`u32::MAX` as the start: no part).
#[derive(Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
}

const NONE: Span = Span {
    start: u32::MAX,
    len: 0,
};

impl Span {
    fn get(self, buf: &[u8]) -> Option<&[u8]> {
        (self.start != u32::MAX).then(|| &buf[self.start as usize..(self.start + self.len) as usize])
    }
}

/// A header's name and value in a `Body`'s buffer.
#[derive(Clone, Copy)]
struct HeaderSpan {
    name: Span,
    value: Span,
}

/// Which of a message's headers are the record path's (their index in its headers).
#[derive(Default, Clone, Copy)]
struct Marks {
    id: Option<u16>,
    mac: Option<u16>,
    late: Option<u16>,
}

/// A consumed message's parts but its topic, as Rust holds them: its key, value and
/// headers back to back in one buffer (one allocation, one free, per message; the
/// header spans stay inline for up to four headers).
pub struct Body {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: (i32, i64),
    buf: Vec<u8>,
    key: Span,
    value: Span,
    headers: Option<SmallVec<[HeaderSpan; 4]>>,
    marks: Marks,
}

/// Builds a `Body`: the parts are copied in as given.
struct Builder {
    buf: Vec<u8>,
}

impl Builder {
    fn put(&mut self, part: Option<&[u8]>) -> Span {
        let Some(part) = part else { return NONE };
        let start = self.buf.len();
        self.buf.extend_from_slice(part);
        // librdkafka caps a message far below 4 GiB (message.max.bytes)
        Span {
            start: u32::try_from(start).unwrap_or(u32::MAX - 1),
            len: u32::try_from(part.len()).unwrap_or(0),
        }
    }
}

impl Body {
    /// `headers` as `(name, value)` pairs; the marks are read off them.
    fn new<'h>(
        partition: i32,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp: (i32, i64),
        headers: Option<impl ExactSizeIterator<Item = (&'h str, Option<&'h [u8]>)> + Clone>,
    ) -> Body {
        let mut size = key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
        if let Some(hs) = &headers {
            size += hs
                .clone()
                .map(|(n, v)| n.len() + v.map_or(0, <[u8]>::len))
                .sum::<usize>();
        }
        let mut b = Builder {
            buf: Vec::with_capacity(size),
        };
        let key = b.put(key);
        let value = b.put(value);
        let mut marks = Marks::default();
        let headers = headers.map(|hs| {
            let mut spans = SmallVec::with_capacity(hs.len());
            for (i, (name, v)) in hs.enumerate() {
                let slot = match name {
                    ID_HEADER => &mut marks.id,
                    LATE_HEADER => &mut marks.late,
                    MAC_HEADER => &mut marks.mac,
                    _ => &mut None,
                };
                *slot = u16::try_from(i).ok().or(*slot);
                spans.push(HeaderSpan {
                    name: b.put(Some(name.as_bytes())),
                    value: b.put(v),
                });
            }
            spans
        });
        Body {
            partition,
            offset,
            timestamp,
            buf: b.buf,
            key,
            value,
            headers,
            marks,
        }
    }

    pub fn key(&self) -> Option<&[u8]> {
        self.key.get(&self.buf)
    }

    pub fn value(&self) -> Option<&[u8]> {
        self.value.get(&self.buf)
    }

    fn mark(&self, at: Option<u16>) -> Header<'_> {
        let at = at?;
        let h = self.headers.as_ref()?.get(usize::from(at))?;
        Some(h.value.get(&self.buf))
    }

    /// The `mw-id` header.
    pub fn id(&self) -> Header<'_> {
        self.mark(self.marks.id)
    }

    /// The `mw-mac` header.
    pub fn mac(&self) -> Header<'_> {
        self.mark(self.marks.mac)
    }

    /// The `mw-late-ms` header.
    pub fn late(&self) -> Header<'_> {
        self.mark(self.marks.late)
    }

    fn header_list(&self) -> Option<impl Iterator<Item = (&str, Option<&[u8]>)>> {
        self.headers.as_ref().map(|hs| {
            hs.iter().map(|h| {
                let name = h.name.get(&self.buf).unwrap_or(b"");
                // copied in from a &str
                (std::str::from_utf8(name).unwrap_or(""), h.value.get(&self.buf))
            })
        })
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
            body: Body::new(
                partition,
                offset,
                key.as_deref(),
                value.as_deref(),
                timestamp,
                headers
                    .as_ref()
                    .map(|hs| hs.iter().map(|(n, v)| (n.as_str(), v.as_deref()))),
            ),
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
        self.body.key().map(|k| PyBytes::new(py, k))
    }
    fn value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.body.value().map(|v| PyBytes::new(py, v))
    }
    fn timestamp(&self) -> (i32, i64) {
        self.body.timestamp
    }
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(hs) = self.body.header_list() else {
            return Ok(None);
        };
        let list = PyList::empty(py);
        for (name, value) in hs {
            list.append((PyString::new(py, name), value.map(|v| PyBytes::new(py, v))))?;
        }
        Ok(Some(list))
    }
    fn error(&self) -> Option<PyObject> {
        None
    }
}

/// A consumed message's parts, taken from librdkafka's message without the GIL (one copy
/// of all its parts, into one buffer), and the index of its topic among those of the poll
/// that took it.
pub struct Taken {
    pub topic: usize,
    body: Body,
}

impl Taken {
    /// `topics`: the topics of the poll's messages so far (this one's is added if new).
    pub fn of<M: Message>(m: &M, topics: &mut Vec<String>) -> Taken {
        let name = m.topic();
        let topic = match topics.iter().position(|t| t == name) {
            Some(i) => i,
            None => {
                topics.push(name.to_owned());
                topics.len() - 1
            }
        };
        let timestamp = match m.timestamp() {
            Timestamp::NotAvailable => (0, -1),
            Timestamp::CreateTime(t) => (1, t),
            Timestamp::LogAppendTime(t) => (2, t),
        };
        let headers = m.headers();
        let body = Body::new(
            m.partition(),
            m.offset(),
            m.key(),
            m.payload(),
            timestamp,
            headers.map(|hs| {
                (0..hs.count()).map(move |i| {
                    let h = hs.get(i);
                    (h.key, h.value)
                })
            }),
        );
        Taken { topic, body }
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
