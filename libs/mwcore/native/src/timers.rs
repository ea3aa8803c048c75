//! The timers of one key interval, in memory, ordered by time per domain (reference:
//! `mwcore.runtime.timers.TimerQueue`, held to it by `libs/mwcore/tests/test_native.py`).
//!
//! A timer is identified by (key, tag): setting it again replaces it. Each domain's heap
//! holds `(timestamp, key, tag, set_id)` and is pruned lazily of replaced or cleared
//! entries, so due timers come out in the order the reference's do. Python sees
//! `mwcore.store.checkpoint.TimerEntry` objects; inside the native core (`effects.rs`)
//! timers stay Rust values.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// `TimeDomain.EVENT`'s index here (the domains are event, wall, hold).
pub const EVENT: u8 = 0;
/// `store.checkpoint._DOMAIN_CODE`, by domain index.
pub const DOMAIN_CODES: [u8; 3] = [b'e', b'w', b'h'];

/// One pending timer.
#[derive(Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub tag: String,
    pub timestamp: i64,
    pub domain: u8,
    pub set_id: Vec<u8>,
}

type Slot = (i64, String, String, Vec<u8>); // a heap's (timestamp, key, tag, set_id)

/// The queue itself, without Python. `live` is by key, then tag (looked up without
/// allocating).
#[derive(Default)]
pub struct Queue {
    live: HashMap<String, HashMap<String, Entry>>,
    count: usize,
    heaps: [BinaryHeap<Reverse<Slot>>; 3],
}

impl Queue {
    pub fn set(&mut self, entry: Entry) {
        let slot = (
            entry.timestamp,
            entry.key.clone(),
            entry.tag.clone(),
            entry.set_id.clone(),
        );
        self.heaps[usize::from(entry.domain)].push(Reverse(slot));
        let tags = self.live.entry(entry.key.clone()).or_default();
        if tags.insert(entry.tag.clone(), entry).is_none() {
            self.count += 1;
        }
    }

    pub fn clear(&mut self, key: &str, tag: &str) -> Option<Entry> {
        let tags = self.live.get_mut(key)?;
        let gone = tags.remove(tag)?;
        if tags.is_empty() {
            self.live.remove(key);
        }
        self.count -= 1;
        Some(gone)
    }

    fn get(&self, key: &str, tag: &str) -> Option<&Entry> {
        self.live.get(key)?.get(tag)
    }

    /// The timestamp of the domain's oldest live timer, the heap pruned down to it.
    fn prune(&mut self, domain: u8) -> Option<i64> {
        loop {
            let Reverse((ts, key, tag, set_id)) = self.heaps[usize::from(domain)].peek()?;
            if self
                .get(key, tag)
                .is_some_and(|e| e.timestamp == *ts && e.set_id == *set_id)
            {
                return Some(*ts);
            }
            self.heaps[usize::from(domain)].pop(); // replaced or cleared since it was pushed
        }
    }

    pub fn oldest(&mut self, domain: u8) -> Option<i64> {
        self.prune(domain)
    }

    /// The oldest timer of `domain` before `limit`, taken out of the queue.
    pub fn pop_due(&mut self, domain: u8, limit: i64) -> Option<Entry> {
        if self.prune(domain)? >= limit {
            return None;
        }
        let Reverse((_, key, tag, _)) = self.heaps[usize::from(domain)].pop()?;
        self.clear(&key, &tag)
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn clear_all(&mut self) {
        self.live.clear();
        self.count = 0;
        for heap in &mut self.heaps {
            heap.clear();
        }
    }
}

/// The index of `domain` among `domains` (the three `TimeDomain`s, compared by identity).
pub fn domain_index(domains: &[Py<PyAny>; 3], domain: &Bound<'_, PyAny>) -> PyResult<u8> {
    match domains.iter().position(|d| domain.is(d)) {
        Some(i) => Ok(i as u8),
        None => Err(PyTypeError::new_err(format!("{domain} is not a TimeDomain"))),
    }
}

/// What the queue makes Python objects of: `TimerEntry` and the three `TimeDomain`s.
pub struct Kinds {
    pub entry: Py<PyAny>,
    pub domains: [Py<PyAny>; 3],
}

impl Kinds {
    pub fn domain_of(&self, domain: &Bound<'_, PyAny>) -> PyResult<u8> {
        domain_index(&self.domains, domain)
    }

    pub fn to_python<'py>(&self, py: Python<'py>, e: &Entry) -> PyResult<Bound<'py, PyAny>> {
        self.entry.bind(py).call1((
            &e.key,
            &e.tag,
            e.timestamp,
            self.domains[usize::from(e.domain)].bind(py),
            PyBytes::new(py, &e.set_id),
        ))
    }

    pub fn entry_of(&self, entry: &Bound<'_, PyAny>) -> PyResult<Entry> {
        Ok(Entry {
            key: entry.getattr("key")?.extract()?,
            tag: entry.getattr("tag")?.extract()?,
            timestamp: entry.getattr("timestamp")?.extract()?,
            domain: self.domain_of(&entry.getattr("domain")?)?,
            set_id: entry.getattr("set_id")?.extract()?,
        })
    }
}

/// `TimerQueue(TimerEntry, (TimeDomain.EVENT, TimeDomain.WALL, TimeDomain.HOLD))`: the
/// reference's methods (`set`, `clear`, `clear_all`, `oldest`, `due`, `len`).
#[pyclass(module = "mwcore_native")]
pub struct TimerQueue {
    pub queue: Queue,
    pub kinds: Kinds,
}

#[pymethods]
impl TimerQueue {
    #[new]
    fn new(entry: Py<PyAny>, domains: [Py<PyAny>; 3]) -> Self {
        TimerQueue {
            queue: Queue::default(),
            kinds: Kinds { entry, domains },
        }
    }

    fn __len__(&self) -> usize {
        self.queue.len()
    }

    fn set(&mut self, entry: &Bound<'_, PyAny>) -> PyResult<()> {
        let e = self.kinds.entry_of(entry)?;
        self.queue.set(e);
        Ok(())
    }

    /// Whether there was such a timer (the reference returns it, or None).
    fn clear(&mut self, key: &str, tag: &str) -> bool {
        self.queue.clear(key, tag).is_some()
    }

    fn clear_all(&mut self) {
        self.queue.clear_all();
    }

    fn oldest(&mut self, domain: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
        let d = self.kinds.domain_of(domain)?;
        Ok(self.queue.oldest(d))
    }

    /// The oldest timer of `domain` before `limit` (a `TimerEntry`), taken out; None if
    /// there is none.
    fn pop_due<'py>(
        &mut self,
        py: Python<'py>,
        domain: &Bound<'py, PyAny>,
        limit: i64,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let d = self.kinds.domain_of(domain)?;
        match self.queue.pop_due(d, limit) {
            Some(e) => Ok(Some(self.kinds.to_python(py, &e)?)),
            None => Ok(None),
        }
    }
}
