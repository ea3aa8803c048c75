//! The checkpoint's wire format, as the commit script (`mwcore/store/scripts.py`) reads
//! it (reference: `mwcore/store/checkpoint_wire.py`, held to it bit for bit by
//! `libs/mwcore/tests/test_native.py`):
//!
//! - `pack_commit`: one checkpoint as the `EVALSHA` call of the commit script, in RESP
//!   (`resp.rs`), straight from the `Checkpoint`'s dicts;
//! - a pending batch's blob (`encode_batch`): each production's body length, id and body;
//! - a timer's hash field (`field_of`) and stored value (`encode_entry`).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

use crate::api::shared::shared;
use crate::store::resp::Resp;

/// One pending timer (`store.checkpoint.TimerEntry`; `domain`: its index, event, wall, hold).
#[derive(Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub tag: String,
    pub timestamp: i64,
    pub domain: u8,
    pub set_id: Vec<u8>,
}

/// The bytes of a `bytes` object (a `TypeError` for anything else, as hiredis would).
fn bytes_of<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8]> {
    Ok(obj.downcast::<PyBytes>()?.as_bytes())
}

/// A `str` or `bytes` argument as hiredis writes it: UTF-8, or the bytes unchanged.
fn text_or_bytes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(s) = obj.downcast::<PyString>() {
        Ok(s.to_str()?.as_bytes().to_vec())
    } else {
        Ok(bytes_of(obj)?.to_vec())
    }
}

/// A "set" section (count, then field/value pairs) and a "delete" section (count,
/// then fields) of a `dict[bytes, bytes | None]`.
fn sets_and_deletes(out: &mut Resp, writes: &Bound<'_, PyDict>) -> PyResult<()> {
    let mut deletes: Vec<Bound<'_, PyAny>> = Vec::new();
    let mut sets = 0i64;
    for (_, v) in writes.iter() {
        if !v.is_none() {
            sets += 1;
        }
    }
    out.int(sets);
    for (k, v) in writes.iter() {
        if v.is_none() {
            deletes.push(k);
        } else {
            out.bulk(bytes_of(&k)?);
            out.bulk(bytes_of(&v)?);
        }
    }
    out.int(deletes.len() as i64);
    for k in &deletes {
        out.bulk(bytes_of(k)?);
    }
    Ok(())
}

fn u16_len(n: usize, what: &str) -> PyResult<[u8; 2]> {
    u16::try_from(n)
        .map(|v| v.to_be_bytes())
        .map_err(|_| PyValueError::new_err(format!("{what} of {n} bytes does not fit a production's frame")))
}

fn i32_len(n: usize, what: &str) -> PyResult<[u8; 4]> {
    i32::try_from(n)
        .map(|v| v.to_be_bytes())
        .map_err(|_| PyValueError::new_err(format!("{what} of {n} bytes does not fit a production's frame")))
}

/// One pending batch in one blob: for each production, its body's length (u32), its
/// id and its body (topic, key, timestamp, headers, value), as `encode_batch` writes.
fn encode_batch(productions: &Bound<'_, PyList>, blob: &mut Vec<u8>) -> PyResult<()> {
    let mut body: Vec<u8> = Vec::with_capacity(256);
    for p in productions.iter() {
        let p = p.downcast::<PyTuple>()?; // a Production (a NamedTuple)
        let id = p.get_item(0)?;
        let topic = p.get_item(1)?;
        let key = p.get_item(2)?;
        let value = p.get_item(3)?;
        let timestamp: i64 = p.get_item(4)?.extract()?;
        let headers = p.get_item(5)?;
        let headers = headers.downcast::<PyTuple>()?;
        body.clear();
        let topic = topic.downcast::<PyString>()?.to_str()?.as_bytes();
        body.extend_from_slice(&u16_len(topic.len(), "a topic")?);
        body.extend_from_slice(topic);
        if key.is_none() {
            body.extend_from_slice(&(-1i32).to_be_bytes());
        } else {
            let key = bytes_of(&key)?;
            body.extend_from_slice(&i32_len(key.len(), "a key")?);
            body.extend_from_slice(key);
        }
        body.extend_from_slice(&timestamp.to_be_bytes());
        body.extend_from_slice(&u16_len(headers.len(), "a header list")?);
        for h in headers.iter() {
            let h = h.downcast::<PyTuple>()?;
            let name = h.get_item(0)?;
            let name = name.downcast::<PyString>()?.to_str()?.as_bytes();
            let hval = h.get_item(1)?;
            let hval = bytes_of(&hval)?;
            body.extend_from_slice(&u16_len(name.len(), "a header name")?);
            body.extend_from_slice(name);
            body.extend_from_slice(&i32_len(hval.len(), "a header value")?);
            body.extend_from_slice(hval);
        }
        body.extend_from_slice(bytes_of(&value)?);
        let n = u32::try_from(body.len())
            .map_err(|_| PyValueError::new_err("a production of over 4 GiB does not fit its frame"))?;
        blob.extend_from_slice(&n.to_be_bytes());
        blob.extend_from_slice(bytes_of(&id)?);
        blob.extend_from_slice(&body);
    }
    Ok(())
}

/// The commit script's `EVALSHA` call for one checkpoint, in RESP (the layout of
/// `checkpoint_wire.commit_args`, after `sha`, the key count and `keys`), from the
/// `Checkpoint`'s parts.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn pack_commit<'py>(
    py: Python<'py>,
    sha: &str,
    keys: &Bound<'py, PyList>,
    token: &str,
    fencing: bool,
    commit_id: &[u8],
    state: &Bound<'py, PyDict>,
    timers: &Bound<'py, PyDict>,
    pending: &Bound<'py, PyDict>,
    acked: &Bound<'py, PyList>,
    seen: &Bound<'py, PyDict>,
    positions: &Bound<'py, PyDict>,
    gc_below: Option<i64>,
    segments: &Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyBytes>> {
    // a set/delete section: two counts, a field and value per set, a field per delete
    let sections = |d: &Bound<'py, PyDict>| 2 + d.len() + d.iter().filter(|(_, v)| !v.is_none()).count();
    let args = 3
        + sections(state)
        + sections(timers)
        + 1
        + 2 * pending.len()
        + 1
        + acked.len()
        + 1
        + 2 * seen.len()
        + 1
        + 2 * positions.len()
        + if gc_below.is_none() { 1 } else { 2 }
        + sections(segments);
    let mut out = Resp::new(3 + keys.len() + args);
    out.bulk(b"EVALSHA");
    out.bulk(sha.as_bytes());
    out.int(keys.len() as i64);
    for k in keys.iter() {
        out.bulk(&text_or_bytes(&k)?);
    }
    out.bulk(token.as_bytes());
    out.bulk(if fencing { b"1" } else { b"0" });
    out.bulk(commit_id);
    sets_and_deletes(&mut out, state)?;
    sets_and_deletes(&mut out, timers)?;
    out.int(pending.len() as i64);
    let mut blob: Vec<u8> = Vec::new();
    for (key, productions) in pending.iter() {
        out.bulk(bytes_of(&key)?);
        blob.clear();
        encode_batch(productions.downcast::<PyList>()?, &mut blob)?;
        out.bulk(&blob);
    }
    out.int(acked.len() as i64);
    for key in acked.iter() {
        out.bulk(bytes_of(&key)?);
    }
    out.int(seen.len() as i64);
    for (rid, ts) in seen.iter() {
        out.int(ts.extract::<i64>()?);
        out.bulk(bytes_of(&rid)?);
    }
    out.int(positions.len() as i64);
    for (field, offset) in positions.iter() {
        out.bulk(&text_or_bytes(&field)?);
        out.int(offset.extract::<i64>()?);
    }
    match gc_below {
        None => out.int(0),
        Some(below) => {
            out.int(1);
            out.int(below);
        }
    }
    sets_and_deletes(&mut out, segments)?;
    Ok(PyBytes::new(py, &out.finish()))
}

/// A timer's hash field (`store.checkpoint.field_of`): the key length-prefixed, then the tag.
pub fn field_of<'py>(py: Python<'py>, key: &str, tag: &str) -> PyResult<Bound<'py, PyBytes>> {
    let klen = u16::try_from(key.len()).map_err(|_| PyValueError::new_err("a key of 64 KiB or more"))?;
    PyBytes::new_with(py, 2 + key.len() + tag.len(), |b| {
        b[..2].copy_from_slice(&klen.to_be_bytes());
        b[2..2 + key.len()].copy_from_slice(key.as_bytes());
        b[2 + key.len()..].copy_from_slice(tag.as_bytes());
        Ok(())
    })
}

/// A timer's stored value (`store.checkpoint.encode_entry`).
pub fn encode_entry<'py>(py: Python<'py>, e: &Entry) -> Bound<'py, PyBytes> {
    let mut out = Vec::with_capacity(9 + e.set_id.len());
    out.push(shared().domain_codes[usize::from(e.domain)]); // (`checkpoint_wire.DOMAIN_CODES`)
    out.extend_from_slice(&e.timestamp.to_be_bytes());
    out.extend_from_slice(&e.set_id);
    PyBytes::new(py, &out)
}
