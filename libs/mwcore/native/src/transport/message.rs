//! A consumed message as the runtime reads it (`topic()`, `partition()`, `offset()`,
//! `key()`, `value()`, `timestamp()`, `headers()`, `error()`: the methods it calls on
//! confluent-kafka's), built once per message from librdkafka's. The three headers the
//! record path reads (`mw-id`, `mw-mac`, `mw-late-ms`) are kept apart as well, so that
//! `envelope::read_ids` reads them without touching Python objects.
//!
//! A message's key, value and headers are copied into one buffer, shared by the
//! messages of a poll (one allocation and one free a poll; the header spans stay
//! inline up to four headers). Header names are kept as the bytes Kafka carries: any
//! producer may write one that is not UTF-8.

use std::borrow::Cow;
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use smallvec::SmallVec;

use crate::api::shared::{is_reserved, shared};

/// One header as the record path reads it: absent, present without a value, or bytes.
/// As in the Python reference, the last of several headers of one name counts.
pub type Header<'a> = Option<Option<&'a [u8]>>;

/// The most a `Body`'s buffer holds, so that a span's start is below `u32::MAX` (which
/// marks no part). librdkafka takes no message over `receive.message.max.bytes` (at
/// most 2^31 - 1); a `Msg` made in Python is refused above it.
const MAX_BUFFER: usize = u32::MAX as usize - 1;

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
        let start = self.start as usize;
        (self.start != u32::MAX).then(|| &buf[start..start + self.len as usize])
    }
}

/// A header's name and value in a `Body`'s buffer.
#[derive(Clone, Copy)]
struct HeaderSpan {
    name: Span,
    value: Span,
}

/// Which of a message's headers are the record path's: their index among its headers
/// (librdkafka reads at most 100,000 headers a message); and how many are the user's
/// (`mwcore.api.headers`: not the kit's own), of how many bytes (names and values).
#[derive(Default, Clone, Copy)]
struct Marks {
    id: Option<u32>,
    mac: Option<u32>,
    late: Option<u32>,
    schema_id: Option<u32>,
    users: u32,
    user_bytes: usize,
}

/// A consumed message's parts but its topic, as Rust holds them: its key, value and
/// headers back to back in a buffer it shares with the other messages of its poll.
pub struct Body {
    pub parts: Parts,
    buf: Arc<Vec<u8>>,
}

/// A `Body` but its buffer: where its parts were put in the buffer being filled.
pub struct Parts {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: (i32, i64),
    key: Span,
    value: Span,
    headers: Option<SmallVec<[HeaderSpan; 4]>>,
    marks: Marks,
}

/// Appends a message's parts to a buffer.
struct Builder<'a> {
    buf: &'a mut Vec<u8>,
}

impl Builder<'_> {
    /// `part` appended (the buffer's whole size was checked against `MAX_BUFFER`).
    fn put(&mut self, part: Option<&[u8]>) -> Span {
        let Some(part) = part else { return NONE };
        let start = self.buf.len();
        self.buf.extend_from_slice(part);
        Span {
            start: start as u32,
            len: part.len() as u32,
        }
    }
}

impl Parts {
    /// `headers` as `(name, value)` pairs, a name as the bytes Kafka carries; the marks
    /// are read off them. The parts are appended to `buf`; None (and nothing appended)
    /// if they would take it past `MAX_BUFFER` bytes.
    pub fn put<'h>(
        buf: &mut Vec<u8>,
        partition: i32,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp: (i32, i64),
        headers: Option<impl ExactSizeIterator<Item = (&'h [u8], Option<&'h [u8]>)> + Clone>,
    ) -> Option<Parts> {
        let mut size = key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
        if let Some(hs) = &headers {
            size += hs
                .clone()
                .map(|(n, v)| n.len() + v.map_or(0, <[u8]>::len))
                .sum::<usize>();
        }
        if size > MAX_BUFFER - buf.len() {
            return None;
        }
        let mut b = Builder { buf };
        let key = b.put(key);
        let value = b.put(value);
        let mut marks = Marks::default();
        let headers = headers.map(|hs| {
            let mut spans = SmallVec::with_capacity(hs.len());
            let named = shared(); // the record id's, the late mark's, the MAC's
            for (i, (name, v)) in hs.enumerate() {
                let slot = if name == named.id_header.as_bytes() {
                    &mut marks.id
                } else if name == named.late_header.as_bytes() {
                    &mut marks.late
                } else if name == named.mac_header.as_bytes() {
                    &mut marks.mac
                } else if name == named.schema_id_header.as_bytes() {
                    &mut marks.schema_id
                } else {
                    if !is_reserved(name) {
                        marks.users += 1;
                        marks.user_bytes += name.len() + v.map_or(0, <[u8]>::len);
                    }
                    &mut None
                };
                *slot = u32::try_from(i).ok().or(*slot);
                spans.push(HeaderSpan {
                    name: b.put(Some(name)),
                    value: b.put(v),
                });
            }
            spans
        });
        Some(Parts {
            partition,
            offset,
            timestamp,
            key,
            value,
            headers,
            marks,
        })
    }

    /// The body, its parts in `buf` (the buffer they were put in).
    pub fn in_buffer(self, buf: Arc<Vec<u8>>) -> Body {
        Body { parts: self, buf }
    }
}

impl Body {
    pub fn key(&self) -> Option<&[u8]> {
        self.parts.key.get(&self.buf)
    }

    pub fn value(&self) -> Option<&[u8]> {
        self.parts.value.get(&self.buf)
    }

    fn mark(&self, at: Option<u32>) -> Header<'_> {
        let h = self.parts.headers.as_ref()?.get(at? as usize)?;
        Some(h.value.get(&self.buf))
    }

    /// The `mw-id` header.
    pub fn id(&self) -> Header<'_> {
        self.mark(self.parts.marks.id)
    }

    /// The `mw-mac` header.
    pub fn mac(&self) -> Header<'_> {
        self.mark(self.parts.marks.mac)
    }

    /// The `mw-late-ms` header.
    pub fn late(&self) -> Header<'_> {
        self.mark(self.parts.marks.late)
    }

    /// The `__value_schema_id` header (the value's writer schema, its body alone the value).
    pub fn schema_id(&self) -> Header<'_> {
        self.mark(self.parts.marks.schema_id)
    }

    /// How many user headers the message has (`mwcore.api.headers`), and their bytes.
    pub fn users(&self) -> (usize, usize) {
        (self.parts.marks.users as usize, self.parts.marks.user_bytes)
    }

    /// The user headers, as `Record.headers` holds them (names as in `header_list`).
    pub fn user_headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let named = shared();
        let mut pairs = Vec::with_capacity(self.parts.marks.users as usize);
        for h in self.parts.headers.iter().flatten() {
            let name = h.name.get(&self.buf).unwrap_or(b"");
            let kit = name == named.id_header.as_bytes()
                || name == named.late_header.as_bytes()
                || name == named.mac_header.as_bytes()
                || name == named.schema_id_header.as_bytes()
                || is_reserved(name);
            if !kit {
                let value = h.value.get(&self.buf).map(|v| PyBytes::new(py, v));
                pairs.push((PyString::new(py, &String::from_utf8_lossy(name)), value).into_pyobject(py)?);
            }
        }
        PyTuple::new(py, pairs)
    }

    /// Each header's name (U+FFFD for bytes that do not decode as UTF-8, where
    /// confluent-kafka's message fails) and value.
    fn header_list(&self) -> Option<impl Iterator<Item = (Cow<'_, str>, Option<&[u8]>)>> {
        self.parts.headers.as_ref().map(|hs| {
            hs.iter().map(|h| {
                let name = h.name.get(&self.buf).unwrap_or(b"");
                (String::from_utf8_lossy(name), h.value.get(&self.buf))
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
    ) -> PyResult<Self> {
        let mut buf = Vec::new(); // a buffer of its own
        let parts = Parts::put(
            &mut buf,
            partition,
            offset,
            key.as_deref(),
            value.as_deref(),
            timestamp,
            headers
                .as_ref()
                .map(|hs| hs.iter().map(|(n, v)| (n.as_bytes(), v.as_deref()))),
        )
        .ok_or_else(|| PyValueError::new_err(format!("a message of more than {MAX_BUFFER} bytes")))?;
        Ok(Msg {
            topic: topic.unbind(),
            body: parts.in_buffer(Arc::new(buf)),
        })
    }

    fn topic(&self, py: Python<'_>) -> Py<PyString> {
        self.topic.clone_ref(py)
    }
    fn partition(&self) -> i32 {
        self.body.parts.partition
    }
    fn offset(&self) -> i64 {
        self.body.parts.offset
    }
    fn key<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.body.key().map(|k| PyBytes::new(py, k))
    }
    fn value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.body.value().map(|v| PyBytes::new(py, v))
    }
    fn timestamp(&self) -> (i32, i64) {
        self.body.parts.timestamp
    }
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(hs) = self.body.header_list() else {
            return Ok(None);
        };
        let list = PyList::empty(py);
        for (name, value) in hs {
            list.append((PyString::new(py, &name), value.map(|v| PyBytes::new(py, v))))?;
        }
        Ok(Some(list))
    }
    fn error(&self) -> Option<PyObject> {
        None
    }
}
