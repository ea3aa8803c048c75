//! Avro decoding of input values (reference: the generated decoders of
//! `mwcore/serde/codegen.py`, read through `AvroSerde.decode`).
//!
//! A `Decoder` reads values written with its reader schema (the header is its own), following the plan `serde/native_plan.py` makes
//! of the schema. Anything else (another writer, a value that does not decode, a varint
//! the reference reads as an integer beyond 64 bits) goes to the reference, which reads
//! it or raises its own error: so the values and the errors (which dead letters carry)
//! are the reference's.

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};

use crate::errors::contained;
use crate::serde::strings::{text, Strings};

/// How a value of one schema is read and written.
pub(crate) enum Plan {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    Bytes,
    Str,
    // name, plan, nullable (missing: written as null); the class its instances are
    // made of (a plain dataclass: `mwcore/serde/typed.py`), if any
    Record(Vec<(Py<PyString>, Plan, bool)>, Option<Py<PyType>>),
    Enum(Vec<Py<PyString>>),
    Fixed(usize),
    Array(Box<Plan>, bool), // counted: items that take no bytes are bounded by a count
    Map(Box<Plan>),
    Union(u64, Box<Plan>), // the null branch's index, the other branch
}

/// The value does not decode here: the reference decides.
struct Refer;

type Read<T> = Result<T, Refer>;

pub(crate) fn plan_of(py: Python<'_>, plan: &Bound<'_, PyAny>) -> PyResult<Plan> {
    let t = plan.downcast::<PyTuple>()?;
    let kind: String = t.get_item(0)?.extract()?;
    Ok(match kind.as_str() {
        "null" => Plan::Null,
        "boolean" => Plan::Boolean,
        "int" => Plan::Int,
        "long" => Plan::Long,
        "float" => Plan::Float,
        "double" => Plan::Double,
        "bytes" => Plan::Bytes,
        "string" => Plan::Str,
        "record" => {
            let mut fields = Vec::new();
            for f in t.get_item(1)?.try_iter()? {
                let f = f?;
                let f = f.downcast::<PyTuple>()?;
                let name: String = f.get_item(0)?.extract()?;
                let nullable: bool = f.get_item(2)?.extract()?;
                fields.push((
                    PyString::intern(py, &name).unbind(),
                    plan_of(py, &f.get_item(1)?)?,
                    nullable,
                ));
            }
            let class = match t.get_item(2) {
                Ok(c) if !c.is_none() => Some(c.downcast_into::<PyType>()?.unbind()),
                _ => None,
            };
            Plan::Record(fields, class)
        }
        "enum" => {
            let mut symbols = Vec::new();
            for s in t.get_item(1)?.try_iter()? {
                let s: String = s?.extract()?;
                symbols.push(PyString::intern(py, &s).unbind());
            }
            Plan::Enum(symbols)
        }
        "fixed" => Plan::Fixed(t.get_item(1)?.extract()?),
        "array" => Plan::Array(Box::new(plan_of(py, &t.get_item(1)?)?), t.get_item(2)?.extract()?),
        "map" => Plan::Map(Box::new(plan_of(py, &t.get_item(1)?)?)),
        "union" => Plan::Union(t.get_item(1)?.extract()?, Box::new(plan_of(py, &t.get_item(2)?)?)),
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "no plan kind {other:?}"
            )))
        }
    })
}

/// An instance of `cls` around `d`, as `object.__new__(cls)` and its `__dict__` set to
/// `d` make it (`cls`: a plain dataclass, whose `__new__` is `object`'s).
fn instance<'py>(
    py: Python<'py>,
    cls: &Bound<'py, PyType>,
    d: Bound<'py, PyDict>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: `cls` is a type object; PyType_GenericAlloc returns a new reference or
    // NULL with an exception set, PyObject_GenericSetDict borrows `d` (it takes its own
    // reference) and returns -1 with an exception set.
    unsafe {
        let obj = pyo3::ffi::PyType_GenericAlloc(cls.as_type_ptr(), 0);
        let obj = Bound::from_owned_ptr_or_err(py, obj)?;
        if pyo3::ffi::PyObject_GenericSetDict(obj.as_ptr(), d.as_ptr(), std::ptr::null_mut()) != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(obj)
    }
}

struct Reader<'b, 's> {
    b: &'b [u8],
    p: usize,
    max_items: u64,
    strings: Option<&'s mut Strings>, // where recurring strings are kept, if anywhere
}

impl<'b> Reader<'b, '_> {
    fn byte(&mut self) -> Read<u8> {
        let c = *self.b.get(self.p).ok_or(Refer)?;
        self.p += 1;
        Ok(c)
    }

    /// A zig-zag varint of at most 64 bits (the reference reads more as a wider int).
    fn long(&mut self) -> Read<i64> {
        let mut z: u64 = 0;
        let mut shift = 0u32;
        loop {
            let c = self.byte()?;
            if shift == 63 && c > 1 {
                return Err(Refer);
            }
            z |= u64::from(c & 0x7F) << shift;
            if c < 0x80 {
                return Ok((z >> 1) as i64 ^ -((z & 1) as i64));
            }
            shift += 7;
            if shift > 63 {
                return Err(Refer);
            }
        }
    }

    fn take(&mut self, n: usize) -> Read<&'b [u8]> {
        let end = self.p.checked_add(n).ok_or(Refer)?;
        let out = self.b.get(self.p..end).ok_or(Refer)?;
        self.p = end;
        Ok(out)
    }

    fn sized(&mut self) -> Read<&'b [u8]> {
        let n = usize::try_from(self.long()?).map_err(|_| Refer)?;
        self.take(n)
    }

    fn read<'py>(&mut self, py: Python<'py>, plan: &Plan) -> Read<Bound<'py, PyAny>> {
        Ok(match plan {
            Plan::Null => py.None().into_bound(py),
            Plan::Boolean => {
                let c = self.byte()?;
                pyo3::types::PyBool::new(py, c == 1).to_owned().into_any()
            }
            Plan::Int | Plan::Long => self.long()?.into_pyobject(py).map_err(|_| Refer)?.into_any(),
            Plan::Float => {
                let raw: [u8; 4] = self.take(4)?.try_into().map_err(|_| Refer)?;
                f64::from(f32::from_le_bytes(raw))
                    .into_pyobject(py)
                    .map_err(|_| Refer)?
                    .into_any()
            }
            Plan::Double => {
                let raw: [u8; 8] = self.take(8)?.try_into().map_err(|_| Refer)?;
                f64::from_le_bytes(raw)
                    .into_pyobject(py)
                    .map_err(|_| Refer)?
                    .into_any()
            }
            Plan::Bytes => PyBytes::new(py, self.sized()?).into_any(),
            Plan::Str => {
                let raw = self.sized()?;
                text(self.strings.as_deref_mut(), py, raw)
                    .ok_or(Refer)?
                    .into_any()
            }
            Plan::Record(fields, class) => {
                let d = PyDict::new(py);
                for (name, sub, _) in fields {
                    let v = self.read(py, sub)?;
                    d.set_item(name.bind(py), v).map_err(|_| Refer)?;
                }
                match class {
                    Some(cls) => instance(py, cls.bind(py), d).map_err(|_| Refer)?,
                    None => d.into_any(),
                }
            }
            Plan::Enum(symbols) => {
                let i = usize::try_from(self.long()?).map_err(|_| Refer)?;
                symbols.get(i).ok_or(Refer)?.bind(py).clone().into_any()
            }
            Plan::Fixed(size) => PyBytes::new(py, self.take(*size)?).into_any(),
            Plan::Array(items, counted) => {
                let out = PyList::empty(py);
                let mut total: u64 = 0;
                loop {
                    let n = self.block(*counted)?;
                    if n == 0 {
                        break;
                    }
                    if *counted {
                        total += n;
                        if total > self.max_items {
                            return Err(Refer);
                        }
                    }
                    for _ in 0..n {
                        out.append(self.read(py, items)?).map_err(|_| Refer)?;
                    }
                }
                out.into_any()
            }
            Plan::Map(values) => {
                let out = PyDict::new(py);
                loop {
                    let n = self.block(false)?;
                    if n == 0 {
                        break;
                    }
                    for _ in 0..n {
                        let k = self.read(py, &Plan::Str)?;
                        let v = self.read(py, values)?;
                        out.set_item(k, v).map_err(|_| Refer)?;
                    }
                }
                out.into_any()
            }
            Plan::Union(null_at, other) => match self.long()? {
                i if i as u64 == *null_at => py.None().into_bound(py),
                i if i as u64 == 1 - *null_at => self.read(py, other)?,
                _ => return Err(Refer),
            },
        })
    }

    /// A block's item count (a negative count is followed by the block's size in
    /// bytes, which the reference skips only where items are not counted).
    fn block(&mut self, counted: bool) -> Read<u64> {
        let n = self.long()?;
        if n < 0 && !counted {
            self.long()?;
        }
        n.checked_abs().map(|n| n as u64).ok_or(Refer)
    }
}

/// Decodes the values of one input: its reader schema's own, here; the rest by the
/// reference (`fallback`: `AvroSerde.decode`).
#[pyclass(module = "mwcore_native")]
pub struct Decoder {
    plan: Plan,
    header: Vec<u8>, // the reader schema's own header (`AvroSerde.header`)
    max_items: u64,
    fallback: Py<PyAny>,
    make: Option<Py<PyAny>>, // called on each value decoded here (a typed stream's reader)
    deferred: AtomicU64,     // values handed to `fallback` (the differential tests count them)
}

#[pymethods]
impl Decoder {
    #[new]
    #[pyo3(signature = (plan, header, max_items, fallback, make=None))]
    fn new(
        py: Python<'_>,
        plan: &Bound<'_, PyAny>,
        header: Vec<u8>,
        max_items: u64,
        fallback: Py<PyAny>,
        make: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        Ok(Decoder {
            plan: plan_of(py, plan)?,
            header,
            max_items,
            fallback,
            make,
            deferred: AtomicU64::new(0),
        })
    }

    fn decode<'py>(&self, py: Python<'py>, data: &Bound<'py, PyBytes>) -> PyResult<Bound<'py, PyAny>> {
        contained(py, || match self.read(py, data.as_bytes(), None) {
            Some(v) => self.made(v),
            None => self.defer(py, data),
        })
    }

    /// How many values it handed to the reference: another writer's, or what does not
    /// decode here.
    #[getter]
    fn deferred(&self) -> u64 {
        self.deferred.load(Ordering::Relaxed)
    }
}

impl Decoder {
    /// `decode` of bytes Rust holds: a `bytes` object is made only for the reference;
    /// its strings from `strings` where given.
    pub(crate) fn decode_slice<'py>(
        &self,
        py: Python<'py>,
        b: &[u8],
        strings: Option<&mut Strings>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // (its caller, the screener, contains a panic of it)
        match self.read(py, b, strings) {
            Some(v) => self.made(v),
            None => self.defer(py, &PyBytes::new(py, b)),
        }
    }

    /// A value decoded here, as `make` makes it (if there is one).
    fn made<'py>(&self, v: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match &self.make {
            Some(make) => make.bind(v.py()).call1((v,)),
            None => Ok(v),
        }
    }

    fn defer<'py>(&self, py: Python<'py>, data: &Bound<'py, PyBytes>) -> PyResult<Bound<'py, PyAny>> {
        self.deferred.fetch_add(1, Ordering::Relaxed);
        self.fallback.bind(py).call1((data,))
    }

    /// The value, if it is written with the reader's schema and decodes here.
    fn read<'py>(
        &self,
        py: Python<'py>,
        b: &[u8],
        strings: Option<&mut Strings>,
    ) -> Option<Bound<'py, PyAny>> {
        if !b.starts_with(&self.header) {
            return None;
        }
        let mut r = Reader {
            b,
            p: self.header.len(),
            max_items: self.max_items,
            strings,
        };
        r.read(py, &self.plan).ok()
    }
}

#[cfg(test)]
#[path = "avro_tests.rs"]
mod tests;
