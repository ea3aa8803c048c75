//! Running user code and applying what it asked for, in Rust (reference:
//! `mwcore.runtime.effects.Applier`, held to it by `libs/mwcore/tests/test_native_effects.py`).
//!
//! `Applier` runs a chunk of records (the record path's last step) or the due timers of
//! a domain, user code on the native `Context` (`context.rs`), and applies each
//! successful call's effects to the open batch: the key's value cached and marked dirty (encoded
//! once per batch by the Python side), timers to the queue (`timers.rs`) and the
//! batch, productions to the batch (or to the weak list). Only the common path is here:
//! the careful redo (`RedoCareful`), which encodes each call's state at once, runs the
//! reference. A failed call is undone by the reference's `_undo`.

use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::api::ids::timer_firing_id;
use crate::api::objects::SlotsType;
use crate::errors::{contained, forced_panic, is_internal};
use crate::runtime::context::{Context, Slot};
use crate::runtime::timers::TimerQueue;
use crate::store::checkpoint::{encode_entry, field_of, Entry};

/// The open batch's parts that calls write to (a `Checkpoint`'s, and where productions go).
struct Batch<'a, 'py> {
    state: &'a Bound<'py, PyDict>,
    timers: &'a Bound<'py, PyDict>,
    out: &'a Bound<'py, PyList>, // the batch's productions, or the weak ones
}

/// The native side of `mwcore.runtime.effects.Applier` (its common, not careful, path).
#[pyclass(module = "mwcore_native")]
pub struct Applier {
    ctx: Py<Context>,
    process_record: Py<PyAny>,
    process_timer: Py<PyAny>,
    values: Py<PyDict>,
    cache_get: Py<PyAny>,
    dirty: Py<PyDict>,
    timers: Py<TimerQueue>,
    undo: Py<PyAny>, // the reference's `_undo(key, error, state)`
    delete_fired: bool,
    late: AtomicU64,        // late productions of the calls since the last `take_late`
    record_type: Py<PyAny>, // mwcore.api.record.Record
    timer_type: SlotsType,  // mwcore.api.record.Timer
}

impl Applier {
    /// Run `call(ctx, arg)` for `key`; the error that made it leave no trace, or None.
    fn run(
        &self,
        py: Python<'_>,
        call: &Py<PyAny>,
        arg: &Bound<'_, PyAny>,
        key: &Bound<'_, PyString>,
        batch: &Batch<'_, '_>,
    ) -> PyResult<Option<PyErr>> {
        let ctx = self.ctx.bind(py);
        if let Err(exc) = call.call1(py, (ctx, arg)) {
            if !exc.is_instance_of::<PyException>(py) {
                return Err(exc); // as the reference: KeyboardInterrupt, SystemExit pass through
            }
            // user code failed: dead-lettered by the caller (RedoCareful propagates)
            self.undo.call1(py, (key, exc.value(py), batch.state))?;
            return Ok(Some(exc));
        }
        let late = self.apply(py, key, batch)?;
        if late > 0 {
            self.late.fetch_add(late, Ordering::Relaxed);
        }
        Ok(None)
    }

    /// What a call's outcome means for its record: None (it ran), the error that made it
    /// fail (user code's, or a panic of the native core's, which is undone as user
    /// code's failures are), or an error for the caller (user code's `BaseException`s,
    /// `RedoCareful`).
    fn failure(
        &self,
        py: Python<'_>,
        outcome: PyResult<Option<PyErr>>,
        key: &Bound<'_, PyString>,
        batch: &Batch<'_, '_>,
    ) -> PyResult<Option<PyErr>> {
        match outcome {
            Err(e) if is_internal(py, &e) => {
                self.undo.call1(py, (key, e.value(py), batch.state))?;
                Ok(Some(e))
            }
            other => other,
        }
    }

    /// Merge one successful call's effects into the cache, the timer queue and the batch;
    /// how many of its productions were late.
    fn apply(&self, py: Python<'_>, key: &Bound<'_, PyString>, batch: &Batch<'_, '_>) -> PyResult<u64> {
        let eff = self.ctx.bind(py).borrow_mut().take_effects();
        match eff.state {
            Slot::Unset => {}
            Slot::Value(v) => {
                self.values.bind(py).set_item(key, v)?;
                self.dirty.bind(py).set_item(key, py.None())?;
            }
            Slot::Cleared => {
                self.values.bind(py).set_item(key, py.None())?;
                let dirty = self.dirty.bind(py);
                if dirty.contains(key)? {
                    dirty.del_item(key)?;
                }
                batch
                    .state
                    .set_item(PyBytes::new(py, key.to_str()?.as_bytes()), py.None())?;
            }
        }
        if !eff.timer_ops.is_empty() {
            let k = key.to_str()?;
            let mut timers = self.timers.bind(py).borrow_mut();
            for op in eff.timer_ops {
                let field = field_of(py, k, &op.tag)?;
                match op.timestamp {
                    None => {
                        timers.queue.clear(k, &op.tag);
                        batch.timers.set_item(field, py.None())?;
                    }
                    Some(ts) => {
                        let entry = Entry {
                            key: k.to_owned(),
                            tag: op.tag,
                            timestamp: ts,
                            domain: op.domain,
                            set_id: op.set_id.to_vec(),
                        };
                        batch.timers.set_item(field, encode_entry(py, &entry))?;
                        timers.queue.set(entry);
                    }
                }
            }
        }
        for p in eff.productions {
            batch.out.append(p)?;
        }
        Ok(eff.late_productions)
    }
}

#[pymethods]
impl Applier {
    /// The reference `Applier`'s parts: the computation's two calls, the state cache's
    /// `values` and `get`, the dirty keys, the timer queue (this core's), `undo(key, error,
    /// state)` for a failed call, whether a firing deletes its stored timer; the
    /// context's: the outputs' encoders and the clock; `kinds`: `(Record, Timer,
    /// Production, (EVENT, WALL, HOLD))`.
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        process_record: Py<PyAny>,
        process_timer: Py<PyAny>,
        values: Py<PyDict>,
        cache_get: Py<PyAny>,
        dirty: Py<PyDict>,
        timers: Py<TimerQueue>,
        undo: Py<PyAny>,
        delete_fired: bool,
        encoders: Py<PyDict>,
        clock: Py<PyAny>,
        kinds: (Py<PyAny>, Py<PyAny>, Py<PyAny>, [Py<PyAny>; 3]),
    ) -> PyResult<Self> {
        let (record_type, timer_type, production, domains) = kinds;
        let ctx = Context::create(
            py,
            encoders,
            values.clone_ref(py),
            cache_get.clone_ref(py),
            clock,
            domains,
            production,
        )?;
        Ok(Applier {
            ctx,
            process_record,
            process_timer,
            values,
            cache_get,
            dirty,
            timers,
            undo,
            delete_fired,
            late: AtomicU64::new(0),
            record_type,
            timer_type: SlotsType::of(timer_type.bind(py).downcast::<PyType>()?)?,
        })
    }

    /// The context user code gets.
    #[getter]
    fn ctx(&self, py: Python<'_>) -> Py<Context> {
        self.ctx.clone_ref(py)
    }

    /// As the reference's `records`: run `items` (each a `Record`, or `(index, error)` for
    /// `bad`) into the open batch (its `state` and `timers`; productions to `out`, its
    /// `seen` each processed record's id); `latency`: `(timestamps, arrivals, arrived)`
    /// or None; `fault` is called before item `fault_at`; `failed(record, error)` gets
    /// each record user code failed on. Returns how many records user code ran on (their
    /// late productions are counted for `take_late`).
    #[allow(clippy::too_many_arguments)]
    fn records(
        &self,
        py: Python<'_>,
        items: &Bound<'_, PyList>,
        state: &Bound<'_, PyDict>,
        timers: &Bound<'_, PyDict>,
        out: &Bound<'_, PyList>,
        seen: &Bound<'_, PyDict>,
        latency: Option<(Bound<'_, PyList>, Bound<'_, PyList>, Bound<'_, PyAny>)>,
        fault_at: isize,
        fault: &Bound<'_, PyAny>,
        bad: &Bound<'_, PyAny>,
        failed: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let b = Batch { state, timers, out };
        let record_type = self.record_type.bind(py);
        let mut processed = 0;
        for (n, item) in items.iter().enumerate() {
            if n as isize == fault_at {
                fault.call0()?;
            }
            if !item.get_type().is(record_type) {
                let (i, exc): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
                bad.call1((i, exc))?;
                continue;
            }
            let record = item.downcast::<PyTuple>()?;
            processed += 1;
            let key = record.get_item(0)?.downcast_into::<PyString>()?;
            let timestamp = record.get_item(2)?;
            let rid = record.get_item(3)?;
            if let Some((timestamps, arrivals, arrived)) = &latency {
                timestamps.append(&timestamp)?;
                arrivals.append(arrived)?;
            }
            {
                let cause = rid.downcast::<PyBytes>()?.as_bytes();
                let ts: i64 = timestamp.extract()?;
                self.ctx.bind(py).borrow_mut().begin(&key, cause, ts);
            }
            let outcome = contained(py, || {
                forced_panic(&key)?;
                self.run(py, &self.process_record, &item, &key, &b)
            });
            match self.failure(py, outcome, &key, &b)? {
                Some(exc) => {
                    failed.call1((&item, exc.value(py)))?;
                }
                None => seen.set_item(rid, timestamp)?,
            }
        }
        Ok(processed)
    }

    /// As the reference's `fire`: the timers of `domain` below `limit_ts`, oldest first
    /// (those the callbacks set below it too), at most `max_firings`, into the open batch
    /// (its `state` and `timers`; productions to `out`); `failed(entry, firing id,
    /// error)` gets each one that raised. Returns how many fired (their late productions
    /// are counted for `take_late`).
    #[pyo3(signature = (domain, limit_ts, state, timers, out, failed, max_firings=None, before=None))]
    #[allow(clippy::too_many_arguments)] // the reference's signature, and the batch's parts
    fn fire(
        &self,
        py: Python<'_>,
        domain: &Bound<'_, PyAny>,
        limit_ts: i64,
        state: &Bound<'_, PyDict>,
        timers: &Bound<'_, PyDict>,
        out: &Bound<'_, PyList>,
        failed: &Bound<'_, PyAny>,
        max_firings: Option<u64>,
        before: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let b = Batch { state, timers, out };
        let d = self.timers.bind(py).borrow().kinds.domain_of(domain)?;
        let mut fired: u64 = 0;
        loop {
            let Some(entry) = self.timers.bind(py).borrow_mut().queue.pop_due(d, limit_ts) else {
                break;
            };
            fired += 1;
            if let Some(before) = before {
                before.call0()?; // as the reference: a firing that raises out counts none
            }
            let fid = timer_firing_id(&entry.set_id, &entry.tag, entry.timestamp);
            let key = PyString::new(py, &entry.key);
            self.cache_get.call1(py, (&key,))?; // loaded, and the most recently used
            self.ctx.bind(py).borrow_mut().begin(&key, &fid, entry.timestamp);
            if self.delete_fired {
                b.timers
                    .set_item(field_of(py, &entry.key, &entry.tag)?, py.None())?;
            }
            let timer = self.timer_type.make(
                py,
                [
                    key.as_any(),
                    PyString::new(py, &entry.tag).as_any(),
                    entry.timestamp.into_pyobject(py)?.as_any(),
                    domain,
                ],
            )?;
            let outcome = contained(py, || self.run(py, &self.process_timer, &timer, &key, &b));
            if let Some(exc) = self.failure(py, outcome, &key, &b)? {
                let e = self.timers.bind(py).borrow().kinds.to_python(py, &entry)?;
                failed.call1((e, PyBytes::new(py, &fid), exc.value(py)))?;
            }
            if max_firings.is_some_and(|m| fired >= m) {
                break;
            }
        }
        Ok(fired)
    }

    /// The late productions (stamped before their cause) of the calls since the last
    /// take, as the reference counts them: per successful call, even when a later call of
    /// the chunk raised out.
    fn take_late(&self) -> u64 {
        self.late.swap(0, Ordering::Relaxed)
    }

    /// As the reference's `encode_dirty`: each dirty key's cached state encoded once,
    /// into `state` (the open batch's, by the key's bytes), and the dirty keys cleared.
    /// `encode`: the codec's; `first_try`: `JsonCodec.first_try()` (`(orjson.dumps,
    /// option)`, whose output stands unless it raised or wrote `null`) or None. Returns
    /// None, or `(key, error)` of the first state that cannot be encoded (the keys stay
    /// dirty; the caller raises `RedoCareful`).
    fn encode_dirty(
        &self,
        py: Python<'_>,
        state: &Bound<'_, PyDict>,
        encode: &Bound<'_, PyAny>,
        first_try: Option<(Bound<'_, PyAny>, Bound<'_, PyAny>)>,
    ) -> PyResult<Option<(Py<PyString>, PyObject)>> {
        let dirty = self.dirty.bind(py);
        let values = self.values.bind(py);
        for key in dirty.keys() {
            let key = key.downcast_into::<PyString>()?;
            let encoded = (|| -> PyResult<Bound<'_, PyBytes>> {
                let value = values.as_any().get_item(&key)?; // KeyError, as values[key]
                if let Some((dumps, option)) = &first_try {
                    match dumps.call1((&value, option)) {
                        Ok(out) => {
                            if let Ok(bytes) = out.downcast_exact::<PyBytes>() {
                                if !contains(bytes.as_bytes(), b"null") {
                                    return Ok(bytes.clone());
                                }
                            }
                        }
                        Err(e) if !e.is_instance_of::<PyException>(py) => return Err(e),
                        Err(_) => {} // encode decides (a big integer, or no JSON)
                    }
                }
                let out = encode.call1((&value,))?;
                match out.downcast_exact::<PyBytes>() {
                    Ok(bytes) => Ok(bytes.clone()),
                    Err(_) => Ok(py.get_type::<PyBytes>().call1((out,))?.downcast_into()?),
                }
            })();
            match encoded {
                Ok(bytes) => state.set_item(PyBytes::new(py, key.to_str()?.as_bytes()), bytes)?,
                Err(e) if e.is_instance_of::<PyException>(py) => {
                    return Ok(Some((key.unbind(), e.into_value(py).into_any())));
                }
                Err(e) => return Err(e), // as the reference: KeyboardInterrupt passes through
            }
        }
        dirty.clear();
        Ok(None)
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        visit.call(&self.ctx)?;
        visit.call(&self.undo)?;
        visit.call(&self.values)?;
        visit.call(&self.dirty)?;
        visit.call(&self.process_record)?;
        visit.call(&self.process_timer)?;
        visit.call(&self.cache_get)
    }
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
