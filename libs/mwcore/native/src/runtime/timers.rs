//! The timers of one key interval, in memory, ordered by time per domain (reference:
//! `mwcore.runtime.timers.TimerQueue`, held to it by `libs/mwcore/tests/test_native_effects.py`).
//!
//! A timer is identified by (key, tag): setting it again replaces it. Due timers come
//! out in the reference's order: by timestamp, then key, then tag.
//!
//! Each domain keeps its pending timers in buckets by timestamp, not in one heap: a
//! windowed computation sets thousands of timers at the same timestamp (every key's
//! window ends with the second), and a heap breaks those ties by comparing strings at
//! every level of every pop. A bucket is sorted when its first timer is due (again only
//! if timers joined it since), and then gives its timers up from the end. Buckets are
//! pruned lazily of replaced or cleared timers: each setting has a number (`gen`) and
//! only the live one counts.
//! Python sees `mwcore.store.checkpoint.TimerEntry` objects; inside the native core
//! (`effects.rs`) timers stay Rust values.

use std::collections::BTreeMap;
use std::sync::Arc;

use foldhash::HashMap;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::store::checkpoint::Entry;

/// `TimeDomain.EVENT`'s index here (the domains are event, wall, hold).
pub const EVENT: u8 = 0;

/// A live timer, under its key and tag.
struct Live {
    timestamp: i64,
    domain: u8,
    set_id: Vec<u8>,
    gen: u64,
}

/// A setting of a timer in its bucket: (key, tag, gen), the names shared with `live`.
type Slot = (Arc<str>, Arc<str>, u64);

/// The settings of one timestamp; once sorted, in reverse (key, tag) order (the next
/// due at the end).
#[derive(Default)]
struct Bucket {
    slots: Vec<Slot>,
    sorted: bool,
}

/// The queue itself, without Python. `live` is by key, then tag (looked up without
/// allocating).
#[derive(Default)]
pub struct Queue {
    live: HashMap<Arc<str>, HashMap<Arc<str>, Live>>,
    count: usize,
    next_gen: u64,
    buckets: [BTreeMap<i64, Bucket>; 3],
}

impl Queue {
    pub fn set(&mut self, entry: Entry) {
        let gen = self.next_gen;
        self.next_gen += 1;
        let key: Arc<str> = match self.live.get_key_value(entry.key.as_str()) {
            Some((k, _)) => k.clone(),
            None => Arc::from(entry.key),
        };
        let tags = self.live.entry(key.clone()).or_default();
        let tag: Arc<str> = match tags.get_key_value(entry.tag.as_str()) {
            Some((t, _)) => t.clone(),
            None => Arc::from(entry.tag),
        };
        let live = Live {
            timestamp: entry.timestamp,
            domain: entry.domain,
            set_id: entry.set_id,
            gen,
        };
        if tags.insert(tag.clone(), live).is_none() {
            self.count += 1;
        }
        let bucket = self.buckets[usize::from(entry.domain)]
            .entry(entry.timestamp)
            .or_default();
        bucket.slots.push((key, tag, gen));
        bucket.sorted = false;
    }

    pub fn clear(&mut self, key: &str, tag: &str) -> Option<Entry> {
        let tags = self.live.get_mut(key)?;
        let (tag, gone) = tags.remove_entry(tag)?;
        let key = if tags.is_empty() {
            self.live.remove_entry(key)?.0
        } else {
            self.live.get_key_value(key)?.0.clone()
        };
        self.count -= 1;
        Some(Entry {
            key: key.to_string(),
            tag: tag.to_string(),
            timestamp: gone.timestamp,
            domain: gone.domain,
            set_id: gone.set_id,
        })
    }

    /// The timestamp of the domain's oldest live timer, its bucket pruned from the end
    /// down to a live timer; with `sort`, sorted first, so that timer is the next due.
    /// (`oldest`, asked at every step of a worker, does not sort: a bucket still taking
    /// timers would be sorted again and again before its time.)
    fn prune(&mut self, domain: u8, sort: bool) -> Option<i64> {
        let live = &self.live;
        let is_live = |(key, tag, gen): &Slot| {
            live.get(key)
                .and_then(|tags| tags.get(tag))
                .is_some_and(|l| l.gen == *gen)
        };
        let buckets = &mut self.buckets[usize::from(domain)];
        loop {
            let mut first = buckets.first_entry()?;
            let bucket = first.get_mut();
            if sort && !bucket.sorted {
                bucket
                    .slots
                    .sort_unstable_by(|a, b| (&b.0, &b.1).cmp(&(&a.0, &a.1)));
                bucket.sorted = true;
            }
            while let Some(slot) = bucket.slots.last() {
                if is_live(slot) {
                    return Some(*first.key());
                }
                bucket.slots.pop(); // replaced or cleared since it was set
            }
            first.remove();
        }
    }

    pub fn oldest(&mut self, domain: u8) -> Option<i64> {
        self.prune(domain, false)
    }

    /// The oldest timer of `domain` before `limit`, taken out of the queue.
    pub fn pop_due(&mut self, domain: u8, limit: i64) -> Option<Entry> {
        if self.prune(domain, false)? >= limit {
            return None; // (the next bucket, not due yet, is left unsorted)
        }
        self.prune(domain, true)?; // the same bucket, sorted: its next timer last
        let mut first = self.buckets[usize::from(domain)].first_entry()?;
        let (key, tag, _) = first.get_mut().slots.pop()?;
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
        for buckets in &mut self.buckets {
            buckets.clear();
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

#[cfg(test)]
#[path = "timers_tests.rs"]
mod tests;
