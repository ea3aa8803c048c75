//! The short strings that recur in a worker's input (keys, and Avro strings such as a
//! language code or a query that is also the key): one Python `str` per distinct value,
//! kept while it recurs, rather than one decoded, allocated, hashed and freed again per
//! record (measured in CHANGELOG.md, measured history, 2026-11-29).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serde::testing::with_python;

    fn held(s: &Strings) -> usize {
        s.young.len() + s.old.len()
    }

    #[test]
    fn a_recurring_string_is_the_same_object() {
        with_python(|py| {
            let mut s = Strings::new();
            let a = s.get(py, b"en-GB").unwrap();
            let b = s.get(py, b"en-GB").unwrap();
            assert_eq!(a.to_str().unwrap(), "en-GB");
            assert!(a.is(&b), "the second lookup gives the first object");
            let c = s.get(py, "ünï".as_bytes()).unwrap();
            assert_eq!(c.to_str().unwrap(), "ünï");
            assert!(!c.is(&a));
            assert_eq!(held(&s), 2);
            // without a table, each is made anew
            let d = text(None, py, b"en-GB").unwrap();
            assert!(!d.is(&a) && d.to_str().unwrap() == "en-GB");
            assert!(text(Some(&mut s), py, b"en-GB").unwrap().is(&a));
        });
    }

    #[test]
    fn not_utf8_is_none_and_not_kept() {
        with_python(|py| {
            let mut s = Strings::new();
            assert!(s.get(py, b"\xff\xfe").is_none());
            assert!(text(None, py, b"a\xc3").is_none());
            assert_eq!(held(&s), 0);
        });
    }

    #[test]
    fn a_string_over_max_len_is_not_kept() {
        with_python(|py| {
            let mut s = Strings::new();
            let longest = vec![b'x'; MAX_LEN];
            let a = s.get(py, &longest).unwrap();
            assert!(a.is(s.get(py, &longest).unwrap()), "MAX_LEN bytes are kept");
            let over = vec![b'y'; MAX_LEN + 1];
            let b = s.get(py, &over).unwrap();
            let c = s.get(py, &over).unwrap();
            assert_eq!(b.to_str().unwrap().len(), MAX_LEN + 1);
            assert!(
                !b.is(&c) && c.to_str().unwrap() == b.to_str().unwrap(),
                "made each time"
            );
            assert!(s.get(py, &[0xFF; MAX_LEN + 1]).is_none());
            assert_eq!(held(&s), 1);
        });
    }

    #[test]
    fn never_more_than_two_generations() {
        with_python(|py| {
            let mut s = Strings::new();
            for i in 0..3 * GENERATION + 7 {
                s.get(py, format!("s{i}").as_bytes()).unwrap();
                assert!(s.young.len() <= GENERATION && s.old.len() <= GENERATION, "at {i}");
            }
            assert_eq!(held(&s), GENERATION + 7); // the last turn at 3 * GENERATION + 1
            assert!(held(&s) <= 2 * GENERATION);
        });
    }

    #[test]
    fn a_string_still_in_use_survives_a_turn_one_not_goes_within_two() {
        with_python(|py| {
            let mut s = Strings::new();
            let kept = s.get(py, b"kept").unwrap();
            let gone = s.get(py, b"gone").unwrap();
            let mut fill = 0;
            let mut others = |s: &mut Strings, n: usize| {
                for _ in 0..n {
                    s.get(py, format!("o{fill}").as_bytes()).unwrap();
                    fill += 1;
                }
            };
            others(&mut s, GENERATION - 2); // young full: kept, gone, and the others
            assert_eq!((s.young.len(), s.old.len()), (GENERATION, 0));
            others(&mut s, 1); // a turn: they are the old generation now
            assert_eq!((s.young.len(), s.old.len()), (1, GENERATION));
            // kept recurs in the old generation: the same object, moved to the young one
            assert!(s.get(py, b"kept").unwrap().is(&kept));
            assert!(s.young.contains_key(&b"kept"[..]) && !s.old.contains_key(&b"kept"[..]));
            others(&mut s, GENERATION - 2); // the young generation full again
            assert!(s.old.contains_key(&b"gone"[..]));
            others(&mut s, 1); // a second turn: the old generation (gone with it) is dropped
            assert!(!s.young.contains_key(&b"gone"[..]) && !s.old.contains_key(&b"gone"[..]));
            assert!(
                s.get(py, b"kept").unwrap().is(&kept),
                "it survived the second turn too"
            );
            let again = s.get(py, b"gone").unwrap();
            assert!(
                !again.is(&gone) && again.to_str().unwrap() == "gone",
                "gone: made anew"
            );
        });
    }
}
