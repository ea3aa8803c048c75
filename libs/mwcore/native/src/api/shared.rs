//! What both sides share, each defined once in the Python package and given to the crate
//! at import (`init`, called by the seam: `mwcore/cores/native/constants.py`): the names of
//! the headers the record path reads, the limits a call of user code is held to (and a
//! record's user headers), the
//! timer domains' stored codes, the texts of user code's errors (made by the package's
//! own functions, so a dead letter's text is the same on both cores), and the package's
//! exception for a bug of the kit's (`InternalError`, kept by `errors.rs`).
//!
//! The widths of a record id and of its MAC are fixed at compile time (`api::ids`,
//! `api::signing`): `init` refuses a package whose are others. (The hashes'
//! personalisations are part of how ids are derived, as the hash is: the unit tests of
//! `ids.rs` and `signing.rs` hold them to the package's vectors.)

use std::sync::OnceLock;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::api::ids::ID_BYTES;
use crate::api::signing::MAC_BYTES;
use crate::errors::set_internal_error;

/// The shared constants (`init`'s arguments).
pub struct Shared {
    pub id_header: String,
    pub late_header: String,
    pub mac_header: String,
    pub schema_id_header: String, // `__value_schema_id` (`serde/framing.py`)
    pub max_value_bytes: usize,
    pub timer_index: u32,
    pub domain_codes: [u8; 3],
    pub undeclared: Py<PyAny>, // (stream, encoders) -> KeyError
    pub too_large: Py<PyAny>,  // (stream, size) -> ValueError
    pub set_none: Py<PyAny>,   // () -> ValueError
    pub max_headers: usize,    // a record's user headers: how many, and their bytes
    pub max_header_bytes: usize,
    pub to_send: Py<PyAny>, // `produce`'s headers -> a production's (`api.headers.to_send`)
    pub over_bounds: Py<PyAny>, // (count, size) -> InvalidRecord (`api.headers.over_bounds`)
}

/// Whether a header's name is one of the kit's (`mwcore.api.headers.is_reserved`): it
/// starts with `mw-` in any case (the schema id header is told apart by name first).
pub fn is_reserved(name: &[u8]) -> bool {
    name.len() >= 3 && name[..3].eq_ignore_ascii_case(b"mw-")
}

static SHARED: OnceLock<Shared> = OnceLock::new();

/// The shared constants; `init` comes first (the seam calls it at import).
pub fn shared() -> &'static Shared {
    SHARED
        .get()
        .expect("mwcore_native.init was not called (import the native core through mwcore.cores.native)")
}

/// Set the shared constants, once per process (a second call must give the same).
#[pyfunction]
#[pyo3(signature = (*, id_bytes, mac_bytes, headers, max_value_bytes, timer_index, domain_codes, internal_error, undeclared, too_large, set_none, max_headers, max_header_bytes, to_send, over_bounds))]
#[allow(clippy::too_many_arguments)]
pub fn init(
    id_bytes: usize,
    mac_bytes: usize,
    headers: (String, String, String, String),
    max_value_bytes: usize,
    timer_index: u32,
    domain_codes: [u8; 3],
    internal_error: Py<PyType>,
    undeclared: Py<PyAny>,
    too_large: Py<PyAny>,
    set_none: Py<PyAny>,
    max_headers: usize,
    max_header_bytes: usize,
    to_send: Py<PyAny>,
    over_bounds: Py<PyAny>,
) -> PyResult<()> {
    if (id_bytes, mac_bytes) != (ID_BYTES, MAC_BYTES) {
        return Err(PyValueError::new_err(format!(
            "the native core was built for ids of {ID_BYTES} bytes and MACs of {MAC_BYTES}, the \
             package's are {id_bytes} and {mac_bytes}: rebuild it (make bootstrap)"
        )));
    }
    set_internal_error(internal_error);
    let (id_header, late_header, mac_header, schema_id_header) = headers;
    let given = Shared {
        id_header,
        late_header,
        mac_header,
        schema_id_header,
        max_value_bytes,
        timer_index,
        domain_codes,
        undeclared,
        too_large,
        set_none,
        max_headers,
        max_header_bytes,
        to_send,
        over_bounds,
    };
    if let Err(again) = SHARED.set(given) {
        let now = shared();
        let same = (again.id_header == now.id_header)
            && (again.late_header == now.late_header)
            && (again.mac_header == now.mac_header)
            && (again.schema_id_header == now.schema_id_header)
            && (again.max_value_bytes == now.max_value_bytes)
            && (again.timer_index == now.timer_index)
            && (again.domain_codes == now.domain_codes)
            && (again.max_headers == now.max_headers)
            && (again.max_header_bytes == now.max_header_bytes);
        if !same {
            return Err(PyValueError::new_err(
                "mwcore_native.init: the constants were given once already, and otherwise",
            ));
        }
    }
    Ok(())
}

/// The error a maker of the package made (`undeclared`, `too_large`, `set_none`), or
/// the maker's own failure.
pub fn error_of(made: PyResult<Bound<'_, PyAny>>) -> PyErr {
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}
