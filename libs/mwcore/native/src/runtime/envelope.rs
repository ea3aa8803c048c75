//! The record path's first step for a chunk of consumed messages: each record's id, its
//! late mark, and whether its id failed to verify with the pipeline secret (reference:
//! `mwcore.runtime.envelope.read_ids`, held to it by `libs/mwcore/tests/test_native.py`).
//!
//! A message without a 16-byte id gets one derived from its position
//! (`mwcore.api.ids.from_position`), and so does one whose id does not verify: it is
//! forged (a dead letter `bad_id`), and its late mark is dropped.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySet};

use crate::api::ids::{from_position, ID_BYTES};
use crate::api::signing::record_verifies;
use crate::transport::message::Msg;

/// What `read_ids` returns (`mwcore.runtime.envelope.Envelope`).
type Envelope<'py> = (
    Bound<'py, PyList>,
    Bound<'py, PyDict>,
    Bound<'py, PySet>,
    Bound<'py, PyDict>,
    Bound<'py, PyDict>,
);

/// `(rids, lates, forged, schema_ids)` of `messages` (each a `Msg`): a `list[bytes]`, a
/// `dict[int, bytes]` of each late record's index and mark, a `set[int]` of the indexes
/// whose id did not verify, a `dict[int, bytes]` of each `__value_schema_id` header, a
/// `dict[int, tuple]` of the user headers of each message that has any.
/// `mac_key`: the signer's key (`Signer.mac_key`), None when nothing is signed;
/// `accept_v1`: MACs of version 1 verify too (`Signer.accepts_v1`).
#[pyfunction]
#[pyo3(signature = (messages, mac_key=None, accept_v1=false))]
pub fn read_ids<'py>(
    py: Python<'py>,
    messages: &Bound<'py, PyList>,
    mac_key: Option<&[u8]>,
    accept_v1: bool,
) -> PyResult<Envelope<'py>> {
    if mac_key.is_some_and(|k| k.is_empty() || k.len() > 64) {
        return Err(PyValueError::new_err("a MAC key is 1 to 64 bytes"));
    }
    let rids = PyList::empty(py);
    let lates = PyDict::new(py);
    let forged = PySet::empty(py)?;
    let schema_ids = PyDict::new(py);
    let users = PyDict::new(py);
    for (i, item) in messages.iter().enumerate() {
        let bound = item.downcast::<Msg>()?;
        let m = bound.get();
        let body = &m.body;
        let mut late = body.late().map(|v| v.unwrap_or(b""));
        let claimed = match body.id() {
            Some(Some(rid)) if rid.len() == ID_BYTES => Some(rid),
            _ => None,
        };
        let rid: Bound<'py, PyBytes> = match claimed {
            Some(rid)
                if mac_key.is_none_or(|k| {
                    let topic = m.topic.bind(py).to_str().map(str::as_bytes).unwrap_or(b"");
                    let value = body.value().unwrap_or(b"");
                    record_verifies(k, rid, topic, body.key(), value, body.mac().flatten(), accept_v1)
                }) =>
            {
                PyBytes::new(py, rid)
            }
            Some(_) => {
                forged.add(i)?;
                late = None;
                PyBytes::new(
                    py,
                    &from_position(
                        m.topic.bind(py).to_str()?,
                        m.body.parts.partition,
                        m.body.parts.offset,
                    ),
                )
            }
            None => PyBytes::new(
                py,
                &from_position(
                    m.topic.bind(py).to_str()?,
                    m.body.parts.partition,
                    m.body.parts.offset,
                ),
            ),
        };
        rids.append(rid)?;
        if let Some(mark) = late {
            lates.set_item(i, PyBytes::new(py, mark))?;
        }
        if let Some(header) = body.schema_id() {
            schema_ids.set_item(i, PyBytes::new(py, header.unwrap_or(b"")))?;
        }
        if body.users().0 > 0 {
            users.set_item(i, body.user_headers(py)?)?;
        }
    }
    Ok((rids, lates, forged, schema_ids, users))
}
