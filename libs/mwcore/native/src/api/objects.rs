//! The kit's value types made from Rust without a Python call: a `Record` or a
//! `Production` (named tuples), a `Timer` (a frozen dataclass with slots).
//!
//! Calling the type costs a frame and, for the frozen dataclass, one
//! `object.__setattr__` per field: about 0.5 µs a `Timer`, once per firing. Here the
//! instance is allocated as `object.__new__` / `tuple.__new__` allocate it
//! (`tp_alloc`) and its fields are stored directly, each through the slot's member
//! descriptor (`PyObject_GenericSetAttr`, which a frozen dataclass's `__setattr__`
//! does not intercept) or as the tuple's items. The result is the object the type's
//! constructor makes (`libs/mwcore/tests/test_native_effects.py` compares them: type,
//! fields, `==`, hash, repr, frozenness; `test_native_screening.py` the screened `Record`s).

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple, PyType};

/// A named tuple type (`Record`, `Production`): its instances made from their fields.
pub struct TupleType {
    ty: Py<PyType>,
    len: usize,
}

impl TupleType {
    /// `ty` must be a subclass of `tuple` whose `_fields` are `len` names.
    pub fn of(ty: &Bound<'_, PyType>, len: usize) -> PyResult<Self> {
        let fields = ty.getattr("_fields")?;
        if !ty.is_subclass_of::<PyTuple>()? || fields.len()? != len {
            return Err(PyTypeError::new_err(format!(
                "{ty} is no named tuple of {len} fields"
            )));
        }
        Ok(TupleType {
            ty: ty.clone().unbind(),
            len,
        })
    }

    pub fn make<'py, const N: usize>(
        &self,
        py: Python<'py>,
        fields: [Bound<'py, PyAny>; N],
    ) -> PyResult<Bound<'py, PyAny>> {
        assert_eq!(N, self.len, "a named tuple's field count");
        // SAFETY: `tp_alloc` gives a new tuple of the type with N empty items (its own
        // reference: refcount 1, as `PyTuple_SetItem` requires); each item is then set
        // once, its reference stolen. Nothing else sees the tuple before it is full.
        unsafe {
            let raw = ffi::PyType_GenericAlloc(self.ty.as_ptr().cast(), N as ffi::Py_ssize_t);
            let tuple = Bound::from_owned_ptr_or_err(py, raw)?;
            for (i, field) in fields.into_iter().enumerate() {
                if ffi::PyTuple_SetItem(tuple.as_ptr(), i as ffi::Py_ssize_t, field.into_ptr()) < 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            Ok(tuple)
        }
    }
}

/// A dataclass with `__slots__` and no `__post_init__` (`Timer`): its instances made
/// from their fields, in the order of its slots.
pub struct SlotsType {
    ty: Py<PyType>,
    names: Vec<Py<PyString>>,
}

impl SlotsType {
    pub fn of(ty: &Bound<'_, PyType>) -> PyResult<Self> {
        let slots = ty.getattr("__dict__")?.get_item("__slots__")?;
        let names = slots
            .downcast::<PyTuple>()?
            .iter()
            .map(|n| Ok(n.downcast_into::<PyString>()?.unbind()))
            .collect::<PyResult<Vec<_>>>()?;
        if ty.hasattr("__post_init__")? || ty.getattr("__dataclass_fields__")?.len()? != names.len() {
            return Err(PyTypeError::new_err(format!("{ty} is no slotted dataclass")));
        }
        Ok(SlotsType {
            ty: ty.clone().unbind(),
            names,
        })
    }

    pub fn make<'py, const N: usize>(
        &self,
        py: Python<'py>,
        fields: [&Bound<'py, PyAny>; N],
    ) -> PyResult<Bound<'py, PyAny>> {
        assert_eq!(N, self.names.len(), "a dataclass's field count");
        // SAFETY: `tp_alloc` gives a new instance with every slot empty (NULL, which
        // its dealloc and traverse skip), GC-tracked as `object.__new__`'s are; each
        // slot is then set through its member descriptor, which takes a reference.
        unsafe {
            let raw = ffi::PyType_GenericAlloc(self.ty.as_ptr().cast(), 0);
            let obj = Bound::from_owned_ptr_or_err(py, raw)?;
            for (name, field) in self.names.iter().zip(fields) {
                if ffi::PyObject_GenericSetAttr(obj.as_ptr(), name.as_ptr(), field.as_ptr()) < 0 {
                    return Err(PyErr::fetch(py));
                }
            }
            Ok(obj)
        }
    }
}
