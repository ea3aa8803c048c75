//! Avro encoding of productions (reference: the generated encoders of
//! `mwcore/serde/codegen.py`, through `AvroSerde.encode`).
//!
//! An `Encoder` writes a value whose every part has exactly the Python type the schema
//! reads back (an `int` in range, a `float`, a `str`, a `dict` of a record, a `list`
//! of an array...), byte for byte as the reference writes it. Anything else (a subclass,
//! a missing field with a default, a value the reference refuses) goes to the
//! reference, which writes it or raises its own error.

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};

use crate::errors::contained;
use crate::serde::avro::{plan_of, Plan};

/// The value is not one this encoder writes: the reference decides.
struct Refer;

/// A zig-zag varint (`pub(super)`: the decoder's tests read back what it writes).
pub(super) fn long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z > 0x7F {
        out.push((z as u8 & 0x7F) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn sized(out: &mut Vec<u8>, raw: &[u8]) {
    long(out, raw.len() as i64);
    out.extend_from_slice(raw);
}

fn int_of(v: &Bound<'_, PyAny>) -> Result<i64, Refer> {
    if !v.is_exact_instance_of::<PyInt>() {
        return Err(Refer); // bool, a subclass, or not an int
    }
    v.extract::<i64>().map_err(|_| Refer)
}

fn write(out: &mut Vec<u8>, plan: &Plan, v: &Bound<'_, PyAny>) -> Result<(), Refer> {
    match plan {
        Plan::Null => {
            if !v.is_none() {
                return Err(Refer);
            }
        }
        Plan::Boolean => {
            if !v.is_exact_instance_of::<PyBool>() {
                return Err(Refer);
            }
            out.push(u8::from(v.is_truthy().map_err(|_| Refer)?));
        }
        Plan::Int => long(out, i64::from(i32::try_from(int_of(v)?).map_err(|_| Refer)?)),
        Plan::Long => long(out, int_of(v)?),
        Plan::Float => {
            let x = float_of(v)?;
            let y = x as f32;
            if y.is_infinite() && !x.is_infinite() {
                return Err(Refer); // the reference refuses it (too large for a float)
            }
            out.extend_from_slice(&y.to_le_bytes());
        }
        Plan::Double => out.extend_from_slice(&float_of(v)?.to_le_bytes()),
        Plan::Bytes => sized(out, exact_bytes(v)?),
        Plan::Str => sized(out, text(v)?),
        Plan::Record(fields, class) => {
            let own; // an instance's __dict__, kept while its fields are written
            let d = match (v.downcast_exact::<PyDict>(), class) {
                (Ok(d), _) => d,
                (Err(_), Some(cls)) if v.get_type().is(cls.bind(v.py())) => {
                    own = v.getattr(pyo3::intern!(v.py(), "__dict__")).map_err(|_| Refer)?;
                    own.downcast_exact::<PyDict>().map_err(|_| Refer)?
                }
                _ => return Err(Refer),
            };
            for (name, sub, nullable) in fields {
                match d.get_item(name.bind(v.py())).map_err(|_| Refer)? {
                    Some(field) => write(out, sub, &field)?,
                    None if *nullable => write(out, sub, &v.py().None().into_bound(v.py()))?,
                    None => return Err(Refer), // a default, or the reference's error
                }
            }
        }
        Plan::Enum(symbols) => {
            let s = text(v)?;
            let i = symbols
                .iter()
                .position(|sym| sym.bind(v.py()).to_str().is_ok_and(|t| t.as_bytes() == s));
            long(out, i.ok_or(Refer)? as i64);
        }
        Plan::Fixed(size) => {
            let raw = exact_bytes(v)?;
            if raw.len() != *size {
                return Err(Refer);
            }
            out.extend_from_slice(raw);
        }
        Plan::Array(items, _) => {
            let list = v.downcast_exact::<PyList>().map_err(|_| Refer)?;
            if !list.is_empty() {
                long(out, list.len() as i64);
                for item in list.iter() {
                    write(out, items, &item)?;
                }
            }
            out.push(0);
        }
        Plan::Map(values) => {
            let d = v.downcast_exact::<PyDict>().map_err(|_| Refer)?;
            if !d.is_empty() {
                long(out, d.len() as i64);
                for (k, item) in d.iter() {
                    sized(out, text(&k)?);
                    write(out, values, &item)?;
                }
            }
            out.push(0);
        }
        Plan::Union(null_at, other) => {
            if v.is_none() {
                out.push((2 * null_at) as u8);
            } else {
                out.push((2 * (1 - null_at)) as u8);
                write(out, other, v)?;
            }
        }
    }
    Ok(())
}

fn float_of(v: &Bound<'_, PyAny>) -> Result<f64, Refer> {
    Ok(v.downcast_exact::<PyFloat>().map_err(|_| Refer)?.value())
}

fn exact_bytes<'a>(v: &'a Bound<'_, PyAny>) -> Result<&'a [u8], Refer> {
    Ok(v.downcast_exact::<PyBytes>().map_err(|_| Refer)?.as_bytes())
}

fn text<'a>(v: &'a Bound<'_, PyAny>) -> Result<&'a [u8], Refer> {
    let s = v.downcast_exact::<PyString>().map_err(|_| Refer)?;
    Ok(s.to_str().map_err(|_| Refer)?.as_bytes()) // a lone surrogate: the reference's error
}

/// Encodes the values of one output: as the generated encoder does, after `prefix`
/// (the single-object header); the rest by the reference (`fallback`: `AvroSerde.encode`).
#[pyclass(module = "mwcore_native")]
pub struct Encoder {
    plan: Plan,
    prefix: Vec<u8>,
    fallback: Py<PyAny>,
    deferred: AtomicU64, // values handed to `fallback` (the differential tests count them)
}

#[pymethods]
impl Encoder {
    #[new]
    fn new(py: Python<'_>, plan: &Bound<'_, PyAny>, prefix: Vec<u8>, fallback: Py<PyAny>) -> PyResult<Self> {
        Ok(Encoder {
            plan: plan_of(py, plan)?,
            prefix,
            fallback,
            deferred: AtomicU64::new(0),
        })
    }

    fn encode<'py>(&self, py: Python<'py>, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        contained(py, || {
            let mut out = Vec::with_capacity(self.prefix.len() + 64);
            out.extend_from_slice(&self.prefix);
            if write(&mut out, &self.plan, value).is_ok() {
                return Ok(PyBytes::new(py, &out).into_any());
            }
            self.deferred.fetch_add(1, Ordering::Relaxed);
            self.fallback.bind(py).call1((value,))
        })
    }

    /// How many values it handed to the reference: a part of another type than the
    /// schema reads back, or what the reference refuses.
    #[getter]
    fn deferred(&self) -> u64 {
        self.deferred.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
#[path = "encode_tests.rs"]
mod tests;
