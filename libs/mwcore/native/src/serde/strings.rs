//! The short strings that recur in a worker's input (keys, and Avro strings such as a
//! language code or a query that is also the key): one Python `str` per distinct value,
//! kept while it recurs, rather than one decoded, allocated, hashed and freed again per
//! record (measured in docs/benchmarks.md, 2026-11-29).
//!
//! Bounded: only strings of at most `MAX_LEN` bytes are kept, in two generations of at
//! most `GENERATION` each. A string is looked up in the young generation, then in the
//! old one (and moved to the young one); when the young one is full it becomes the old
//! one and the old one is dropped, so a string still in use survives a turn and one
//! that no longer recurs goes within two. Input of ever new strings costs a lookup and
//! an insertion each, and holds at most `2 * GENERATION` strings. The maps' hashing is
//! seeded per process (the strings are input).

use foldhash::{HashMap, HashMapExt};
use pyo3::prelude::*;
use pyo3::types::PyString;

/// The longest string kept, in bytes; longer ones are made each time.
pub const MAX_LEN: usize = 64;
/// The most strings in a generation.
pub const GENERATION: usize = 32_768;

/// `raw` as a `str` (None when it is not UTF-8): from `strings` where given.
pub fn text<'py>(strings: Option<&mut Strings>, py: Python<'py>, raw: &[u8]) -> Option<Bound<'py, PyString>> {
    match strings {
        Some(strings) => strings.get(py, raw),
        None => std::str::from_utf8(raw).ok().map(|s| PyString::new(py, s)),
    }
}

#[derive(Default)]
pub struct Strings {
    young: HashMap<Box<[u8]>, Py<PyString>>,
    old: HashMap<Box<[u8]>, Py<PyString>>,
}

impl Strings {
    pub fn new() -> Self {
        Strings {
            young: HashMap::with_capacity(1024),
            old: HashMap::new(),
        }
    }

    /// `raw` as a `str`, or None when it is not UTF-8.
    pub fn get<'py>(&mut self, py: Python<'py>, raw: &[u8]) -> Option<Bound<'py, PyString>> {
        if raw.len() > MAX_LEN {
            return text(None, py, raw);
        }
        if let Some(s) = self.young.get(raw) {
            return Some(s.bind(py).clone());
        }
        let s = match self.old.remove_entry(raw) {
            Some((raw, s)) => {
                let out = s.bind(py).clone();
                self.keep(raw, s);
                return Some(out);
            }
            None => PyString::new(py, std::str::from_utf8(raw).ok()?),
        };
        self.keep(raw.into(), s.clone().unbind());
        Some(s)
    }

    fn keep(&mut self, raw: Box<[u8]>, s: Py<PyString>) {
        if self.young.len() >= GENERATION {
            self.old = std::mem::replace(&mut self.young, HashMap::with_capacity(GENERATION));
        }
        self.young.insert(raw, s);
    }
}
