//! The native core of mwcore (`MW_CORE=native`): the per-record and per-commit paths in
//! Rust, reached from Python only through the seam (`mwcore.cores`).
//!
//! Its modules mirror the Python package's layers, each using only those below it
//! (`tests/test_crate_layout.py` checks it): `runtime` (the envelope, the screening of a
//! chunk, the dedup filter, the timer queue, user code's context and effects) above
//! `store` (the checkpoint's wire format, RESP) and `transport` (the group consumer and
//! the producer on librdkafka), above `api` (ids, MACs, the kit's value types), above
//! `serde` (Avro, the strings table). Each part has a pure-Python reference in the
//! library, and differential tests hold the two to identical output
//! (`libs/mwcore/tests/test_native*.py`, `tests/test_differential.py`). This file only
//! lists the modules and registers what Python sees.

mod api;
mod errors;
mod runtime;
mod serde;
mod store;
mod transport;

use pyo3::prelude::*;

#[pymodule]
fn mwcore_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(api::shared::init, m)?)?;
    m.add("PanicException", m.py().get_type::<pyo3::panic::PanicException>())?;
    m.add_function(wrap_pyfunction!(errors::panic_on_key, m)?)?;
    m.add_function(wrap_pyfunction!(store::checkpoint::pack_commit, m)?)?;
    m.add_class::<runtime::bloom::Bloom>()?;
    m.add_class::<serde::avro::Decoder>()?;
    m.add_class::<serde::encode::Encoder>()?;
    m.add_class::<transport::producer::Producer>()?;
    m.add_class::<transport::consumer::GroupConsumer>()?;
    m.add_class::<transport::message::Msg>()?;
    m.add_function(wrap_pyfunction!(runtime::envelope::read_ids, m)?)?;
    m.add_class::<runtime::screening::Screener>()?;
    m.add_class::<runtime::timers::TimerQueue>()?;
    m.add_class::<runtime::context::Context>()?;
    m.add_class::<runtime::context::StateHandle>()?;
    m.add_class::<runtime::context::TimerHandle>()?;
    m.add_class::<runtime::effects::Applier>()?;
    m.add(
        "KafkaFailure",
        m.py().get_type::<transport::kafka::KafkaFailure>(),
    )?;
    m.add("STRINGS_GENERATION", serde::strings::GENERATION)?;
    Ok(())
}
