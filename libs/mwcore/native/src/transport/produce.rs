//! One production handed to librdkafka from Rust (`producer.rs` sends a batch of
//! them): through `rd_kafka_produceva` on a topic handle made once per topic, the
//! headers in librdkafka's own list, the key and value borrowed for the call (librdkafka
//! copies them). rdkafka's `send` names the topic instead: a copy of the name, and
//! librdkafka's look-up of the topic under its lock, on every production.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::ptr;

use rdkafka::bindings;
use rdkafka::types::RDKafkaRespErr;

/// A production's headers, in librdkafka's own list: handed over to librdkafka by a
/// production it takes, destroyed here otherwise.
pub struct Headers(*mut bindings::rd_kafka_headers_t);

impl Headers {
    pub fn new() -> Self {
        // SAFETY: a new, empty list (librdkafka grows it as needed)
        Headers(unsafe { bindings::rd_kafka_headers_new(4) })
    }

    /// A header: its name as given (its length passed, so no NUL is needed), its value
    /// copied (None: a header without one).
    pub fn add(&mut self, name: &str, value: Option<&[u8]>) {
        let (ptr, len) = value.map_or((ptr::null(), 0), |v| {
            (v.as_ptr().cast::<c_void>(), v.len() as isize)
        });
        // SAFETY: the list is live (owned here); librdkafka copies the name and value.
        unsafe { bindings::rd_kafka_header_add(self.0, name.as_ptr().cast(), name.len() as isize, ptr, len) };
    }
}

impl Drop for Headers {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: still ours: no production took it
            unsafe { bindings::rd_kafka_headers_destroy(self.0) };
        }
    }
}

/// A topic's librdkafka handle, made once per topic and producer. (rdkafka's `send`
/// names the topic: a copy of the name, and librdkafka's look-up of the topic under its
/// lock, on every production.)
struct TopicHandle(*mut bindings::rd_kafka_topic_t);

// SAFETY: librdkafka's topic handles are thread-safe.
unsafe impl Send for TopicHandle {}

impl Drop for TopicHandle {
    fn drop(&mut self) {
        // SAFETY: made by `rd_kafka_topic_new`, destroyed once, before its producer
        // (`producer::Producer`'s fields drop in order).
        unsafe { bindings::rd_kafka_topic_destroy(self.0) };
    }
}

#[derive(Default)]
pub struct Topics(HashMap<String, TopicHandle>);

impl Topics {
    /// `topic`'s handle (made the first time, with the producer's topic settings); for
    /// a name librdkafka refuses (or one with a NUL), the error a production to it gets.
    pub fn handle(
        &mut self,
        rk: *mut bindings::rd_kafka_t,
        topic: &str,
    ) -> Result<*mut bindings::rd_kafka_topic_t, RDKafkaRespErr> {
        if let Some(h) = self.0.get(topic) {
            return Ok(h.0);
        }
        let name = CString::new(topic).map_err(|_| RDKafkaRespErr::RD_KAFKA_RESP_ERR__INVALID_ARG)?;
        // SAFETY: a live client; a null configuration takes the producer's defaults.
        let rkt = unsafe { bindings::rd_kafka_topic_new(rk, name.as_ptr(), ptr::null_mut()) };
        if rkt.is_null() {
            return Err(RDKafkaRespErr::RD_KAFKA_RESP_ERR__INVALID_ARG);
        }
        self.0.insert(topic.to_owned(), TopicHandle(rkt));
        Ok(rkt)
    }
}

/// One production handed to librdkafka (copied: `RD_KAFKA_MSG_F_COPY`), its headers
/// with it when it takes it; or librdkafka's error.
pub fn produce(
    rk: *mut bindings::rd_kafka_t,
    rkt: *mut bindings::rd_kafka_topic_t,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    timestamp: i64,
    headers: &mut Headers,
    batch: u64,
) -> Result<(), RDKafkaRespErr> {
    use bindings::rd_kafka_vtype_t as T;
    use bindings::rd_kafka_vu_s__bindgen_ty_1 as U;
    let vu = |vtype: T, u: U| bindings::rd_kafka_vu_t { vtype, u };
    let mem = |b: Option<&[u8]>| U {
        mem: bindings::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 {
            ptr: b.map_or(ptr::null_mut(), |b| b.as_ptr() as *mut c_void),
            size: b.map_or(0, <[u8]>::len),
        },
    };
    let vus = [
        vu(T::RD_KAFKA_VTYPE_RKT, U { rkt }),
        vu(T::RD_KAFKA_VTYPE_PARTITION, U { i32_: -1 }), // the partitioner's
        vu(
            T::RD_KAFKA_VTYPE_MSGFLAGS,
            U {
                i: bindings::RD_KAFKA_MSG_F_COPY,
            },
        ),
        vu(T::RD_KAFKA_VTYPE_VALUE, mem(value)),
        vu(T::RD_KAFKA_VTYPE_KEY, mem(key)),
        vu(
            T::RD_KAFKA_VTYPE_OPAQUE,
            U {
                ptr: batch as usize as *mut c_void,
            },
        ), // the delivery opaque
        vu(T::RD_KAFKA_VTYPE_TIMESTAMP, U { i64_: timestamp }),
        vu(T::RD_KAFKA_VTYPE_HEADERS, U { headers: headers.0 }),
    ];
    // SAFETY: a live client and topic handle; the key and value outlive the call
    // (librdkafka copies them); the headers are ours until it takes them.
    let err = unsafe { bindings::rd_kafka_produceva(rk, vus.as_ptr(), vus.len()) };
    if err.is_null() {
        headers.0 = ptr::null_mut(); // librdkafka's now
        return Ok(());
    }
    // SAFETY: the error is ours to read and destroy.
    let code = unsafe { bindings::rd_kafka_error_code(err) };
    unsafe { bindings::rd_kafka_error_destroy(err) };
    Err(code)
}
