//! What a librdkafka error is to Python (`KafkaFailure(code, text)`, which the seam
//! turns into confluent-kafka's `KafkaException` with the same code), and a partition as
//! the consumer's callers name it.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use rdkafka::error::KafkaError;

create_exception!(
    mwcore_native,
    KafkaFailure,
    PyException,
    "A librdkafka error: args (code, text)."
);

pub type Part = (String, i32);

pub fn failure(err: &KafkaError) -> PyErr {
    let code = err.rdkafka_error_code().map_or(-1, |c| c as i32);
    KafkaFailure::new_err((code, err.to_string()))
}
