//! The record path's second step for a chunk of consumed messages: which become
//! records, and the records themselves, before user code sees any (reference:
//! `mwcore.runtime.screening.screen`, held to it by `libs/mwcore/tests/test_native_screening.py`).
//!
//! In one pass, in order: a duplicate is dropped (counted); every other id joins the
//! batch's seen ids; an id that did not verify, a timestamp out of bounds or a late mark
//! sets the message aside (`early`: its index and why); every other message becomes its
//! `Record` (the key decoded as UTF-8, the value by its topic's decoder), or `(index,
//! error)` when it has no usable key or its value does not decode.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySet, PyString, PyTuple, PyType};

use crate::api::objects::TupleType;
use crate::api::shared::shared;
use crate::errors::{contained, is_internal};
use crate::serde::avro::Decoder;
use crate::serde::strings::{text, Strings};
use crate::transport::message::Msg;

/// What a topic's values are decoded by: a native `Decoder`, or any Python callable.
enum Decode {
    Native(Py<Decoder>),
    Call(PyObject),
}

/// `(duplicates, early, items, keys)`, as `screen` returns them.
type Screened<'py> = (usize, Bound<'py, PyList>, Bound<'py, PyList>, Bound<'py, PySet>);

/// The screening of one worker's chunks: the types and bounds it works with, given once.
#[pyclass(module = "mwcore_native", frozen)]
pub struct Screener {
    record: TupleType,
    serialization_error: Py<PyType>,
    key_error: PyObject,
    with_schema_id: PyObject, // (header, value) -> the prefixed value (`serde.framing.with_schema_id_header`)
    min_ts: i64,
    max_ts: i64,
    max_key: usize,
    strings: Mutex<Strings>, // the keys and short value strings that recur
}

#[pymethods]
impl Screener {
    /// `record`: the `Record` type; `serialization_error`: the error a value that does
    /// not decode raises (any other propagates); `key_error(raw)`: the error of a key
    /// that is no record's key; `with_schema_id(header, value)`: a value named by its
    /// `__value_schema_id` header, as the prefixed value it stands for; the bounds of
    /// timestamps and of a key's bytes.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        record: Py<PyType>,
        serialization_error: Py<PyType>,
        key_error: PyObject,
        with_schema_id: PyObject,
        min_ts: i64,
        max_ts: i64,
        max_key: usize,
    ) -> PyResult<Self> {
        Ok(Screener {
            record: TupleType::of(record.bind(py), 8)?,
            serialization_error,
            key_error,
            with_schema_id,
            min_ts,
            max_ts,
            max_key,
            strings: Mutex::new(Strings::new()),
        })
    }

    /// `(duplicates, early, items, keys)` of a chunk of `Msg`s, given their ids, which
    /// are duplicates (None: none checked), which did not verify, their late marks, the
    /// batch's seen ids (added to), their `__value_schema_id` headers, their user headers
    /// and `bindings` (topic -> (stream, decode)).
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (messages, rids, dup, forged, lates, schema_ids, headers, batch_seen, bindings))]
    fn screen<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyList>,
        rids: &Bound<'py, PyList>,
        dup: Option<&Bound<'py, PyList>>,
        forged: &Bound<'py, PySet>,
        lates: &Bound<'py, PyDict>,
        schema_ids: &Bound<'py, PyDict>,
        headers: &Bound<'py, PyDict>,
        batch_seen: &Bound<'py, PySet>,
        bindings: &Bound<'py, PyDict>,
    ) -> PyResult<Screened<'py>> {
        let mut duplicates = 0usize;
        let early = PyList::empty(py);
        let items = PyList::empty(py);
        let keys = PySet::empty(py)?;
        let error_type = self.serialization_error.bind(py);
        let check_forged = !forged.is_empty();
        let check_late = !lates.is_empty();
        let check_schema_ids = !schema_ids.is_empty();
        let check_headers = !headers.is_empty();
        let given = shared();
        let no_headers = PyTuple::empty(py).into_any();
        let mut last_topic: Option<Py<PyString>> = None;
        let mut binding: Option<(Bound<'py, PyAny>, Decode)> = None;
        // Without the table while another thread screens (user code may let it run).
        let mut strings = self.strings.try_lock().ok();
        for (i, item) in messages.iter().enumerate() {
            let bound = item.downcast::<Msg>()?;
            let m = bound.get();
            let rid = rids.get_item(i)?;
            if let Some(dup) = dup {
                if dup.get_item(i)?.is_truthy()? {
                    duplicates += 1;
                    continue;
                }
            }
            batch_seen.add(&rid)?;
            if check_forged && forged.contains(i)? {
                early.append((i, "bad_id"))?;
                continue;
            }
            let ts = m.body.parts.timestamp.1;
            if ts < self.min_ts || ts > self.max_ts {
                early.append((i, "bad_timestamp"))?;
                continue;
            }
            if check_late && lates.contains(i)? {
                early.append((i, "late"))?;
                continue;
            }
            let raw = m.body.key();
            let key = raw
                .filter(|k| k.len() <= self.max_key)
                .and_then(|k| text(strings.as_deref_mut(), py, k));
            let Some(key) = key else {
                let raw = raw.map(|k| PyBytes::new(py, k));
                items.append((i, self.key_error.bind(py).call1((raw,))?))?;
                continue;
            };
            keys.add(&key)?;
            let mut own = no_headers.clone();
            if check_headers {
                if let Some(hs) = headers.get_item(i)? {
                    let (count, size) = m.body.users();
                    if count > given.max_headers || size > given.max_header_bytes {
                        items.append((i, given.over_bounds.bind(py).call1((count, size))?))?;
                        continue;
                    }
                    own = hs;
                }
            }
            if last_topic.as_ref().is_none_or(|t| !t.is(&m.topic)) {
                last_topic = Some(m.topic.clone_ref(py));
                binding = Some(bind(bindings, m.topic.bind(py))?);
            }
            let Some((stream, decode)) = &binding else {
                unreachable!()
            };
            let mut value = m.body.value().unwrap_or(b"");
            let prefixed; // a value named by its header: the header, then the value
            if check_schema_ids {
                if let Some(header) = schema_ids.get_item(i)? {
                    let body = PyBytes::new(py, value);
                    match self.with_schema_id.bind(py).call1((header, body)) {
                        Ok(v) => prefixed = v.downcast_into::<PyBytes>()?,
                        Err(e) if e.is_instance(py, error_type) => {
                            items.append((i, e.into_value(py)))?;
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                    value = prefixed.as_bytes();
                }
            }
            let decoded = contained(py, || match decode {
                Decode::Native(d) => d.borrow(py).decode_slice(py, value, strings.as_deref_mut()),
                Decode::Call(f) => f.bind(py).call1((PyBytes::new(py, value),)),
            });
            let value = match decoded {
                Ok(v) => v,
                Err(e) if e.is_instance(py, error_type) || is_internal(py, &e) => {
                    items.append((i, e.into_value(py)))?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let fields = [
                key.into_any(),
                value,
                ts.into_pyobject(py)?.into_any(),
                rid,
                stream.clone(),
                m.body.parts.partition.into_pyobject(py)?.into_any(),
                m.body.parts.offset.into_pyobject(py)?.into_any(),
                own,
            ];
            items.append(self.record.make(py, fields)?)?;
        }
        Ok((duplicates, early, items, keys))
    }
}

/// A topic's stream and decoder, from `bindings` (a `KeyError` for a topic not there).
fn bind<'py>(
    bindings: &Bound<'py, PyDict>,
    topic: &Bound<'py, PyString>,
) -> PyResult<(Bound<'py, PyAny>, Decode)> {
    let Some(b) = bindings.get_item(topic)? else {
        return Err(pyo3::exceptions::PyKeyError::new_err(topic.clone().unbind()));
    };
    let b = b.downcast::<PyTuple>()?;
    let stream = b.get_item(0)?;
    let f = b.get_item(1)?;
    let native = f
        .getattr("__self__")
        .ok()
        .and_then(|s| s.downcast_into::<Decoder>().ok());
    let decode = match native {
        Some(d) => Decode::Native(d.unbind()),
        None => Decode::Call(f.unbind()),
    };
    Ok((stream, decode))
}
