//! What one poll of the native consumer takes (`consumer.rs`): its messages, their
//! parts copied into one buffer for the whole poll (`message.rs`; measured against a
//! buffer a message in docs/benchmarks.md, 2026-11-29), the names of their topics
//! (matched per poll, not copied per message), and the errors met on the way; handed
//! to Python in one crossing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use pyo3::types::PyString;
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message as _};

use crate::message::{Msg, Taken};

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
        match Taken::of(m, &mut self.names, &mut self.chunks) {
            Some(t) => self.messages.push(t),
            None => self.errors.push((
                -1,
                format!(
                    "{}[{}] at {}: a message of more than 4 GiB",
                    m.topic(),
                    m.partition(),
                    m.offset()
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
