//! The context user code gets, in Rust (reference: `mwcore.api.context.Context`, held to
//! it through `effects.rs`'s differential tests in `libs/mwcore/tests/test_native_effects.py`):
//! `key`, `state.get/set/clear`, `timers.set/clear`, `produce`, `now_ms`. Each call of user
//! code records its effects here, with no Python frame of the kit's on the way; the
//! native `Applier` (`effects.rs`) takes them after the call.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::api::ids::derive;
use crate::api::objects::TupleType;
use crate::api::shared::{error_of, shared};
use crate::errors::contained;
use crate::runtime::timers::{domain_index, EVENT};

/// What a call did to its key's state.
pub enum Slot {
    Unset,
    Cleared,
    Value(Py<PyAny>),
}

/// Set (`timestamp` given) or clear (None) the key's timer `tag`.
pub struct TimerOp {
    pub tag: String,
    pub timestamp: Option<i64>,
    pub domain: u8,
    pub set_id: [u8; 16],
}

/// What one call of user code asked for.
pub struct Effects {
    pub state: Slot,
    pub timer_ops: Vec<TimerOp>,
    pub productions: Vec<Py<PyAny>>,
    pub late_productions: u64,
}

impl Default for Effects {
    fn default() -> Self {
        Effects {
            state: Slot::Unset,
            timer_ops: Vec::new(),
            productions: Vec::new(),
            late_productions: 0,
        }
    }
}

/// `int(x)` of a timestamp user code gave (an int, or anything `int()` takes).
fn as_int(x: &Bound<'_, PyAny>) -> PyResult<i64> {
    match x.extract::<i64>() {
        Ok(v) => Ok(v),
        Err(_) => x.py().get_type::<pyo3::types::PyInt>().call1((x,))?.extract(),
    }
}

/// The context handed to user code; one serves a whole key interval.
#[pyclass(module = "mwcore_native")]
pub struct Context {
    key: Py<PyString>,
    cause: Vec<u8>,
    cause_ts: i64,
    effects: Effects,
    encoders: Py<PyDict>, // stream -> (topic, encode)
    values: Py<PyDict>,   // the state cache's key -> value (None: no state)
    load: Py<PyAny>,      // the state cache's get (a key not cached)
    clock: Py<PyAny>,
    domains: [Py<PyAny>; 3],
    production: TupleType, // mwcore.api.record.Production
    state: Option<Py<StateHandle>>,
    timers: Option<Py<TimerHandle>>,
}

impl Context {
    /// A context over the state cache's `values` (`load`: its get, for a key not cached),
    /// with its handles; `domains`: the three `TimeDomain`s; `production`: the
    /// `Production` class.
    pub fn create(
        py: Python<'_>,
        encoders: Py<PyDict>,
        values: Py<PyDict>,
        load: Py<PyAny>,
        clock: Py<PyAny>,
        domains: [Py<PyAny>; 3],
        production: Py<PyAny>,
    ) -> PyResult<Py<Context>> {
        let ctx = Py::new(
            py,
            Context {
                key: PyString::new(py, "").unbind(),
                cause: Vec::with_capacity(16),
                cause_ts: 0,
                effects: Effects::default(),
                encoders,
                values,
                load,
                clock,
                domains,
                production: TupleType::of(production.bind(py).downcast::<PyType>()?, 6)?,
                state: None,
                timers: None,
            },
        )?;
        let state = Py::new(
            py,
            StateHandle {
                ctx: ctx.clone_ref(py),
            },
        )?;
        let timers = Py::new(
            py,
            TimerHandle {
                ctx: ctx.clone_ref(py),
            },
        )?;
        {
            let mut c = ctx.bind(py).borrow_mut();
            c.state = Some(state);
            c.timers = Some(timers);
        }
        Ok(ctx)
    }

    /// Point the context at `key` and the call's cause, with no effects yet.
    pub fn begin(&mut self, key: &Bound<'_, PyString>, cause: &[u8], cause_ts: i64) {
        self.key = key.clone().unbind();
        self.cause.clear();
        self.cause.extend_from_slice(cause);
        self.cause_ts = cause_ts;
        self.effects = Effects::default();
    }

    /// What the last call asked for (taken: the context holds none after).
    pub fn take_effects(&mut self) -> Effects {
        std::mem::take(&mut self.effects)
    }

    fn domain_of(&self, domain: Option<&Bound<'_, PyAny>>) -> PyResult<u8> {
        domain.map_or(Ok(EVENT), |d| domain_index(&self.domains, d))
    }
}

#[pymethods]
impl Context {
    #[getter]
    fn key(&self, py: Python<'_>) -> Py<PyString> {
        self.key.clone_ref(py)
    }

    #[getter]
    fn state(&self, py: Python<'_>) -> Option<Py<StateHandle>> {
        self.state.as_ref().map(|s| s.clone_ref(py))
    }

    #[getter]
    fn timers(&self, py: Python<'_>) -> Option<Py<TimerHandle>> {
        self.timers.as_ref().map(|t| t.clone_ref(py))
    }

    /// Wall-clock time in ms from the runtime's clock (for wall-time timers).
    fn now_ms(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.clock.call0(py)
    }

    /// Produce `value` to the output `stream`, keyed by `key` (default: this key), with
    /// user `headers` (`mwcore.api.headers.to_send` checks them).
    #[pyo3(signature = (stream, value, timestamp, key=None, headers=None))]
    fn produce(
        &mut self,
        py: Python<'_>,
        stream: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        timestamp: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyString>>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        contained(py, || {
            let encoders = self.encoders.bind(py);
            let given = shared();
            let Some(found) = encoders.get_item(stream)? else {
                return Err(error_of(given.undeclared.bind(py).call1((stream, encoders))));
            };
            let (topic, encode): (Bound<'_, PyAny>, Bound<'_, PyAny>) = found.extract()?;
            let encoded = encode.call1((value,))?;
            let size = encoded.len()?;
            if size > given.max_value_bytes {
                return Err(error_of(given.too_large.bind(py).call1((stream, size))));
            }
            let own = match headers {
                Some(hs) if !hs.is_none() => given.to_send.bind(py).call1((hs,))?,
                _ => PyTuple::empty(py).into_any(),
            };
            let ts = as_int(timestamp)?;
            if ts < self.cause_ts {
                self.effects.late_productions += 1;
            }
            let out_key = match key {
                Some(k) => PyBytes::new(py, k.to_str()?.as_bytes()),
                None => PyBytes::new(py, self.key.bind(py).to_str()?.as_bytes()),
            };
            let index = u32::try_from(self.effects.productions.len()).unwrap_or(u32::MAX);
            let pid = PyBytes::new(py, &derive(&self.cause, index));
            let fields = [
                pid.into_any(),
                topic,
                out_key.into_any(),
                encoded,
                ts.into_pyobject(py)?.into_any(),
                own,
            ];
            let production = self.production.make(py, fields)?.unbind();
            self.effects.productions.push(production);
            Ok(())
        })
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if let Some(s) = &self.state {
            visit.call(s)?;
        }
        if let Some(t) = &self.timers {
            visit.call(t)?;
        }
        if let Slot::Value(v) = &self.effects.state {
            visit.call(v)?;
        }
        for p in &self.effects.productions {
            visit.call(p)?;
        }
        visit.call(&self.encoders)?;
        visit.call(&self.values)?;
        visit.call(&self.load)?;
        visit.call(&self.clock)
    }

    fn __clear__(&mut self) {
        self.state = None;
        self.timers = None;
        self.effects = Effects::default();
    }
}

/// Read and write the current key's state (`ctx.state`).
#[pyclass(module = "mwcore_native", frozen)]
pub struct StateHandle {
    ctx: Py<Context>,
}

#[pymethods]
impl StateHandle {
    #[pyo3(signature = (default=None))]
    fn get(&self, py: Python<'_>, default: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        let default = || default.unwrap_or_else(|| py.None());
        let (key, values, load) = {
            let ctx = self.ctx.bind(py).borrow();
            match &ctx.effects.state {
                Slot::Value(v) => return Ok(v.clone_ref(py)),
                Slot::Cleared => return Ok(default()),
                Slot::Unset => (
                    ctx.key.clone_ref(py),
                    ctx.values.clone_ref(py),
                    ctx.load.clone_ref(py),
                ),
            }
        };
        // As the state cache's get: a cached value moves to the end (most recently used).
        let values = values.bind(py);
        let key = key.bind(py);
        let value = match values.get_item(key)? {
            Some(v) => {
                values.del_item(key)?;
                values.set_item(key, &v)?;
                v
            }
            None => load.call1(py, (key,))?.into_bound(py),
        };
        Ok(if value.is_none() {
            default()
        } else {
            value.unbind()
        })
    }

    fn set(&self, py: Python<'_>, value: Py<PyAny>) -> PyResult<()> {
        if value.is_none(py) {
            return Err(error_of(shared().set_none.bind(py).call0()));
        }
        self.ctx.bind(py).borrow_mut().effects.state = Slot::Value(value);
        Ok(())
    }

    fn clear(&self, py: Python<'_>) {
        self.ctx.bind(py).borrow_mut().effects.state = Slot::Cleared;
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.ctx)
    }
}

/// Set and clear the current key's timers, by tag (`ctx.timers`).
#[pyclass(module = "mwcore_native", frozen)]
pub struct TimerHandle {
    ctx: Py<Context>,
}

#[pymethods]
impl TimerHandle {
    /// Fire `process_timer` for this key at `timestamp`; replaces a timer of the same tag.
    #[pyo3(signature = (tag, timestamp, domain=None))]
    fn set(
        &self,
        py: Python<'_>,
        tag: String,
        timestamp: &Bound<'_, PyAny>,
        domain: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        contained(py, || {
            let timestamp = as_int(timestamp)?;
            let mut ctx = self.ctx.bind(py).borrow_mut();
            let domain = ctx.domain_of(domain)?;
            let index = shared().timer_index + u32::try_from(ctx.effects.timer_ops.len()).unwrap_or(0);
            let set_id = derive(&ctx.cause, index);
            ctx.effects.timer_ops.push(TimerOp {
                tag,
                timestamp: Some(timestamp),
                domain,
                set_id,
            });
            Ok(())
        })
    }

    fn clear(&self, py: Python<'_>, tag: String) {
        let mut ctx = self.ctx.bind(py).borrow_mut();
        ctx.effects.timer_ops.push(TimerOp {
            tag,
            timestamp: None,
            domain: EVENT,
            set_id: [0; 16],
        });
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.ctx)
    }
}
