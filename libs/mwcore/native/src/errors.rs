//! The package's exceptions as the crate raises them (reference: `mwcore/errors.py`), and
//! panics contained.
//!
//! A panic is a bug of the kit's. Where native code runs for one record (decoding it,
//! encoding a production, user code's context and effects), `contained` turns a panic,
//! of the code it runs or of a native call that code made, into the package's
//! `InternalError`: an `Exception`, which the record path makes a dead letter
//! (`internal_error`) as it does any failed call, undoing what the call changed. PyO3
//! turns a panic anywhere else into its `PanicException` (a `BaseException`, not
//! caught by the record path), which stops the process with one line
//! (`mwcore/process/bootstrap.py`).

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use pyo3::panic::PanicException;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};

/// `mwcore.errors.InternalError`, given at import (`api::shared::init`).
static INTERNAL_ERROR: OnceLock<Py<PyType>> = OnceLock::new();

/// The package's `InternalError` (set once; a second call keeps the first).
pub fn set_internal_error(ty: Py<PyType>) {
    let _ = INTERNAL_ERROR.set(ty);
}

/// `InternalError(text)` (or, before `init`, PyO3's `PanicException`).
pub fn internal_error(py: Python<'_>, text: String) -> PyErr {
    match INTERNAL_ERROR.get() {
        Some(ty) => match ty.bind(py).call1((text,)) {
            Ok(exc) => PyErr::from_value(exc),
            Err(e) => e,
        },
        None => PanicException::new_err(text),
    }
}

/// Whether `err` is the package's `InternalError`.
pub fn is_internal(py: Python<'_>, err: &PyErr) -> bool {
    INTERNAL_ERROR
        .get()
        .is_some_and(|ty| err.is_instance(py, ty.bind(py)))
}

fn said(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// `f()`, a panic of it (or a `PanicException` of a native call it made) made the
/// package's `InternalError`.
pub fn contained<T>(py: Python<'_>, f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Err(e)) if e.is_instance_of::<PanicException>(py) => Err(internal_error(
            py,
            format!("a panic in the native core: {}", e.value(py)),
        )),
        Ok(result) => result,
        Err(payload) => Err(internal_error(
            py,
            format!("a panic in the native core: {}", said(payload.as_ref())),
        )),
    }
}

/// The key whose records' user code the native core panics before (test plumbing:
/// `MW_PANIC_KEY`, `process/plumbing.py`), if one was set.
static PANIC_KEY: OnceLock<String> = OnceLock::new();

/// Make the native core panic before running user code on a record of `key` (for the
/// tests of a panic's containment; set once per process).
#[pyfunction]
pub fn panic_on_key(key: String) {
    let _ = PANIC_KEY.set(key);
}

pub fn forced_panic(key: &Bound<'_, PyString>) -> PyResult<()> {
    if let Some(k) = PANIC_KEY.get() {
        if k == key.to_str()? {
            panic!("a panic forced for the records of key {k:?} (MW_PANIC_KEY)");
        }
    }
    Ok(())
}
