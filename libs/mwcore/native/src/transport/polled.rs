//! What one poll of the native consumer takes (`consumer.rs`): its messages, their
//! parts copied into one buffer for the whole poll (`message.rs`; measured against a
//! buffer a message in CHANGELOG.md's measured history, 2026-11-29), the names of their topics
//! (matched per poll, not copied per message), and the errors met on the way; handed
//! to Python in one crossing.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::marker::PhantomData;
use std::ptr;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyString;
use rdkafka::bindings::{
    rd_kafka_header_cnt, rd_kafka_header_get_all, rd_kafka_headers_t, rd_kafka_message_headers,
    rd_kafka_message_t, rd_kafka_message_timestamp, rd_kafka_timestamp_type_t, rd_kafka_topic_name,
};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::types::RDKafkaRespErr;

use crate::transport::message::{Msg, Parts};

/// A librdkafka error as the poll reports it: (code, text).
pub type Failed = (i32, String);

#[derive(Default)]
pub struct Polled {
    pub messages: Vec<Taken>,
    names: Vec<String>,   // the topics of `messages`, by their index
    chunks: Vec<Vec<u8>>, // the buffers of `messages`' parts, by their index
    pub errors: Vec<Failed>,
}

impl Polled {
    /// `m`'s parts; or, for a message of more than 4 GiB (which librdkafka never takes:
    /// `receive.message.max.bytes` is at most 2^31 - 1), an error.
    pub fn take(&mut self, m: &BorrowedMessage<'_>) {
        // SAFETY: `m.ptr()` is the live message `m` borrows.
        unsafe { self.take_raw(m.ptr()) }
    }

    /// `take` of a message librdkafka handed over itself (a batch's): its parts, or its
    /// error as rdkafka reads a message's error.
    ///
    /// # Safety
    /// `m` is a live message, not destroyed before this returns.
    pub unsafe fn take_raw(&mut self, m: *const rd_kafka_message_t) {
        let raw = Raw::of(m);
        if raw.err() != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            let e = match raw.err() {
                RDKafkaRespErr::RD_KAFKA_RESP_ERR__PARTITION_EOF => KafkaError::PartitionEOF(raw.partition()),
                e => KafkaError::MessageConsumption(e.into()),
            };
            return self.failed(&e);
        }
        match Taken::of(&raw, &mut self.names, &mut self.chunks) {
            Some(t) => self.messages.push(t),
            None => self.errors.push((
                -1,
                format!(
                    "{}[{}] at {}: a message of more than 4 GiB",
                    raw.topic(),
                    raw.partition(),
                    raw.offset()
                ),
            )),
        }
    }

    pub fn failed(&mut self, e: &KafkaError) {
        self.errors
            .push((e.rdkafka_error_code().map_or(-1, |c| c as i32), e.to_string()));
    }

    /// The Python side of the messages, one `str` per topic shared by its messages
    /// (`known`: those made so far, kept by the consumer); and the errors.
    pub fn into_python(
        self,
        py: Python<'_>,
        known: &Mutex<HashMap<String, Py<PyString>>>,
    ) -> PyResult<(Vec<Py<Msg>>, Vec<Failed>)> {
        let topics: Vec<Py<PyString>> = {
            let mut known = known.lock().expect("topics");
            self.names
                .iter()
                .map(|name| {
                    known
                        .entry(name.clone())
                        .or_insert_with(|| PyString::intern(py, name).unbind())
                        .clone_ref(py)
                })
                .collect()
        };
        let chunks: Vec<Arc<Vec<u8>>> = self.chunks.into_iter().map(Arc::new).collect();
        let messages = self
            .messages
            .into_iter()
            .map(|m| {
                let topic = topics[m.topic].clone_ref(py);
                let buf = chunks[m.chunk].clone();
                m.into_msg(py, topic, buf)
            })
            .collect::<PyResult<Vec<_>>>()?;
        Ok((messages, self.errors))
    }
}

/// A consumed message's parts, taken from librdkafka's message without the GIL: copied
/// into the poll's current buffer (`chunks`' last; one buffer, one allocation and one
/// free, for all of a poll's messages, unless they pass `MAX_BUFFER` bytes), with the
/// index of that buffer and of its topic among those of the poll that took it.
pub struct Taken {
    pub topic: usize,
    pub chunk: usize,
    parts: Parts,
}

impl Taken {
    /// `topics`: the topics of the poll's messages so far (this one's is added if new);
    /// `chunks`: its buffers so far (a new one started when the last is full). None for
    /// a message of more than `MAX_BUFFER` bytes, which librdkafka never takes.
    pub fn of(m: &Raw<'_>, topics: &mut Vec<String>, chunks: &mut Vec<Vec<u8>>) -> Option<Taken> {
        let name = m.topic();
        let topic = match topics.iter().position(|t| t == name) {
            Some(i) => i,
            None => {
                topics.push(name.to_owned());
                topics.len() - 1
            }
        };
        let headers = RawHeaders::of(m);
        let headers = headers.as_ref().map(|hs| (0..hs.count()).map(|i| hs.get(i)));
        let put = |buf: &mut Vec<u8>| {
            Parts::put(
                buf,
                m.partition(),
                m.offset(),
                m.key(),
                m.payload(),
                m.timestamp(),
                headers.clone(),
            )
        };
        if chunks.is_empty() {
            chunks.push(Vec::new());
        }
        let mut parts = put(chunks.last_mut().expect("a chunk"));
        if parts.is_none() && !chunks.last().expect("a chunk").is_empty() {
            chunks.push(Vec::new()); // the last is full: a buffer of its own
            parts = put(chunks.last_mut().expect("a chunk"));
        }
        Some(Taken {
            topic,
            chunk: chunks.len() - 1,
            parts: parts?,
        })
    }

    /// The Python side, its topic and buffer given (one `str` per topic, shared).
    pub fn into_msg(self, py: Python<'_>, topic: Py<PyString>, buf: Arc<Vec<u8>>) -> PyResult<Py<Msg>> {
        Py::new(
            py,
            Msg {
                topic,
                body: self.parts.in_buffer(buf),
            },
        )
    }
}

/// A consumed message's headers as librdkafka holds them, a name as its bytes. (rdkafka's
/// `Headers::get` panics on a name that is not UTF-8.)
struct RawHeaders<'a> {
    ptr: *const rd_kafka_headers_t,
    _message: PhantomData<&'a ()>,
}

impl<'a> RawHeaders<'a> {
    /// None when the message has none (to librdkafka: no header list, or an empty one).
    fn of(m: &'a Raw<'_>) -> Option<RawHeaders<'a>> {
        let mut headers: *mut rd_kafka_headers_t = ptr::null_mut();
        // SAFETY: `m.ptr` is a live message (`Raw`); librdkafka parses its headers once
        // and keeps them, owned by the message, until the message is destroyed.
        let err = unsafe { rd_kafka_message_headers(m.ptr, &mut headers) };
        (err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && !headers.is_null()).then_some(RawHeaders {
            ptr: headers,
            _message: PhantomData,
        })
    }

    fn count(&self) -> usize {
        // SAFETY: `ptr` is the message's header list (see `of`).
        unsafe { rd_kafka_header_cnt(self.ptr) }
    }

    /// The `i`-th header (`i` below `count()`): its name's bytes, and its value (None
    /// for a header without one).
    fn get(&self, i: usize) -> (&'a [u8], Option<&'a [u8]>) {
        let mut name: *const c_char = ptr::null();
        let mut value: *const c_void = ptr::null();
        let mut size: usize = 0;
        // SAFETY: as in `of`; librdkafka points into the message's header list: a name
        // NUL-terminated, a value of `size` bytes, or null.
        unsafe {
            let err = rd_kafka_header_get_all(self.ptr, i, &mut name, &mut value, &mut size);
            if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
                return (b"", None);
            }
            let name = CStr::from_ptr(name).to_bytes();
            let value = (!value.is_null()).then(|| std::slice::from_raw_parts(value.cast::<u8>(), size));
            (name, value)
        }
    }
}

/// A consumed message as librdkafka holds it, read field by field (rdkafka's
/// `BorrowedMessage` reads the same fields; a batch's messages come without one).
pub struct Raw<'a> {
    ptr: *const rd_kafka_message_t,
    _message: PhantomData<&'a ()>,
}

impl Raw<'_> {
    /// # Safety
    /// `ptr` is a live message, kept alive while the `Raw` is.
    unsafe fn of(ptr: *const rd_kafka_message_t) -> Self {
        Raw {
            ptr,
            _message: PhantomData,
        }
    }

    fn message(&self) -> &rd_kafka_message_t {
        // SAFETY: a live message (`of`).
        unsafe { &*self.ptr }
    }

    fn err(&self) -> RDKafkaRespErr {
        self.message().err
    }

    fn topic(&self) -> &str {
        // SAFETY: a consumed message's topic handle is live with it; its name is
        // NUL-terminated (a topic's name is ASCII: "" where it would not read as UTF-8).
        unsafe { CStr::from_ptr(rd_kafka_topic_name(self.message().rkt)) }
            .to_str()
            .unwrap_or("")
    }

    fn partition(&self) -> i32 {
        self.message().partition
    }

    fn offset(&self) -> i64 {
        self.message().offset
    }

    fn part(&self, data: *const c_void, len: usize) -> Option<&[u8]> {
        // SAFETY: librdkafka's key or payload: null, or `len` bytes owned by the message.
        (!data.is_null()).then(|| unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) })
    }

    fn key(&self) -> Option<&[u8]> {
        self.part(self.message().key, self.message().key_len)
    }

    fn payload(&self) -> Option<&[u8]> {
        self.part(self.message().payload, self.message().len)
    }

    /// (type, ms) as confluent-kafka gives it: 0 and -1 when there is none (as rdkafka
    /// reads it: a time of -1 is none).
    fn timestamp(&self) -> (i32, i64) {
        let mut kind = rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: a live message (`of`).
        let ms = unsafe { rd_kafka_message_timestamp(self.ptr, &mut kind) };
        if ms == -1 {
            return (0, -1);
        }
        match kind {
            rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_CREATE_TIME => (1, ms),
            rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_LOG_APPEND_TIME => (2, ms),
            _ => (0, -1),
        }
    }
}
