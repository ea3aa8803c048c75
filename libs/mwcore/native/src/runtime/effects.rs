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

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};
use pyo3::{PyTraverseError, PyVisit};

use crate::api::ids::timer_firing_id;
use crate::api::objects::SlotsType;
use crate::runtime::context::{Context, Slot};
use crate::runtime::timers::TimerQueue;
use crate::store::checkpoint::{encode_entry, field_of, Entry};

/// The open batch's parts that calls write to (a `Checkpoint`'s).
struct Batch<'py> {
    owner: Bound<'py, PyAny>, // the Checkpoint (for the reference's undo)
    state: Bound<'py, PyDict>,
    timers: Bound<'py, PyDict>,
    productions: Bound<'py, PyList>,
    seen: Bound<'py, PyDict>,
}

impl<'py> Batch<'py> {
    fn of(batch: &Bound<'py, PyAny>) -> PyResult<Self> {
        Ok(Batch {
            owner: batch.clone(),
            state: batch.getattr("state")?.downcast_into()?,
            timers: batch.getattr("timers")?.downcast_into()?,
            productions: batch.getattr("productions")?.downcast_into()?,
            seen: batch.getattr("seen")?.downcast_into()?,
        })
    }
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
    owner: Py<PyAny>, // the reference Applier: its weak list, counters and undo
    counters: Py<PyAny>,
    weak: bool,
    delete_fired: bool,
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
        batch: &Batch<'_>,
    ) -> PyResult<Option<PyErr>> {
        let ctx = self.ctx.bind(py);
        if let Err(exc) = call.call1(py, (ctx, arg)) {
            if !exc.is_instance_of::<PyException>(py) {
                return Err(exc); // as the reference: KeyboardInterrupt, SystemExit pass through
            }
            // user code failed: dead-lettered by the caller (RedoCareful propagates)
            self.owner
                .call_method1(py, "_undo", (key, exc.value(py), &batch.owner))?;
            return Ok(Some(exc));
        }
        self.apply(py, key, batch)?;
        Ok(None)
    }

    /// Merge one successful call's effects into the cache, the timer queue and the batch.
    fn apply(&self, py: Python<'_>, key: &Bound<'_, PyString>, batch: &Batch<'_>) -> PyResult<()> {
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
        if !eff.productions.is_empty() {
            let out = if self.weak {
                self.owner.bind(py).getattr("weak")?.downcast_into::<PyList>()?
            } else {
                batch.productions.clone()
            };
            for p in eff.productions {
                out.append(p)?;
            }
        }
        if eff.late_productions > 0 {
            let counters = self.counters.bind(py);
            let n: u64 = counters.getattr("late_productions")?.extract()?;
            counters.setattr("late_productions", n + eff.late_productions)?;
        }
        Ok(())
    }
}

#[pymethods]
impl Applier {
    /// `owner`: the reference `Applier` this serves (its computation, cache, dirty keys,
    /// timer queue, counters, weak list); `ctx`'s parts besides: the outputs' encoders
    /// and the clock; `kinds`: `(Record, Timer, Production, (EVENT, WALL, HOLD))`.
    #[new]
    fn new(
        py: Python<'_>,
        owner: &Bound<'_, PyAny>,
        encoders: Py<PyDict>,
        clock: Py<PyAny>,
        kinds: (Py<PyAny>, Py<PyAny>, Py<PyAny>, [Py<PyAny>; 3]),
    ) -> PyResult<Self> {
        let (record_type, timer_type, production, domains) = kinds;
        let comp = owner.getattr("comp")?;
        let cache = owner.getattr("cache")?;
        let values: Py<PyDict> = cache.getattr("values")?.downcast_into::<PyDict>()?.unbind();
        let cache_get = cache.getattr("get")?.unbind();
        let timers: Py<TimerQueue> = owner.getattr("timers")?.downcast_into::<TimerQueue>()?.unbind();
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
            process_record: comp.getattr("process_record")?.unbind(),
            process_timer: comp.getattr("process_timer")?.unbind(),
            values,
            cache_get,
            dirty: owner.getattr("dirty")?.downcast_into::<PyDict>()?.unbind(),
            timers,
            counters: owner.getattr("counters")?.unbind(),
            weak: !owner.getattr("weak")?.is_none(),
            delete_fired: owner.getattr("_delete_fired")?.extract()?,
            owner: owner.clone().unbind(),
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
    /// `bad`) into `batch` (whose `seen` gets each processed record's id); `latency`:
    /// `(timestamps, arrivals, arrived)` or None; `fault` is called before item
    /// `fault_at`; `failed(record, error)` gets each record user code failed on.
    /// Returns how many records user code ran on.
    #[allow(clippy::too_many_arguments)]
    fn records(
        &self,
        py: Python<'_>,
        items: &Bound<'_, PyList>,
        batch: &Bound<'_, PyAny>,
        latency: Option<(Bound<'_, PyList>, Bound<'_, PyList>, Bound<'_, PyAny>)>,
        fault_at: isize,
        fault: &Bound<'_, PyAny>,
        bad: &Bound<'_, PyAny>,
        failed: &Bound<'_, PyAny>,
    ) -> PyResult<usize> {
        let b = Batch::of(batch)?;
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
            match self.run(py, &self.process_record, &item, &key, &b)? {
                Some(exc) => {
                    failed.call1((&item, exc.value(py)))?;
                }
                None => b.seen.set_item(rid, timestamp)?,
            }
        }
        Ok(processed)
    }

    /// As the reference's `fire`: the timers of `domain` below `limit_ts`, oldest first
    /// (those the callbacks set below it too), at most `max_firings`; `failed(entry,
    /// firing id, error)` gets each one that raised. Returns how many fired.
    #[pyo3(signature = (domain, limit_ts, batch, failed, max_firings=None, before=None))]
    #[allow(clippy::too_many_arguments)] // the reference's signature
    fn fire(
        &self,
        py: Python<'_>,
        domain: &Bound<'_, PyAny>,
        limit_ts: i64,
        batch: &Bound<'_, PyAny>,
        failed: &Bound<'_, PyAny>,
        max_firings: Option<u64>,
        before: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let b = Batch::of(batch)?;
        let d = self.timers.bind(py).borrow().kinds.domain_of(domain)?;
        let mut fired: u64 = 0;
        let result = (|| -> PyResult<()> {
            loop {
                let Some(entry) = self.timers.bind(py).borrow_mut().queue.pop_due(d, limit_ts) else {
                    return Ok(());
                };
                fired += 1;
                if let Some(before) = before {
                    before.call0()?;
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
                if let Some(exc) = self.run(py, &self.process_timer, &timer, &key, &b)? {
                    let e = self.timers.bind(py).borrow().kinds.to_python(py, &entry)?;
                    failed.call1((e, PyBytes::new(py, &fid), exc.value(py)))?;
                }
                if max_firings.is_some_and(|m| fired >= m) {
                    return Ok(());
                }
            }
        })();
        result?; // as the reference: a firing that raises out counts none
        let counters = self.counters.bind(py);
        let n: u64 = counters.getattr("timers_fired")?.extract()?;
        counters.setattr("timers_fired", n + fired)?;
        Ok(fired)
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
        visit.call(&self.owner)?;
        visit.call(&self.process_record)?;
        visit.call(&self.process_timer)?;
        visit.call(&self.cache_get)
    }
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
