//! The Bloom filter of record ids (reference: `mwcore/runtime/bloom.py`), bit for bit:
//! the same mixing (splitmix64), the same positions, the same words.

use foldhash::{HashSet, HashSetExt};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PySet};

use crate::api::ids::ID_BYTES;

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn id_of<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<&'a [u8; ID_BYTES]> {
    let raw = key.downcast::<PyBytes>()?.as_bytes();
    raw.try_into()
        .map_err(|_| PyValueError::new_err(format!("a record id is {ID_BYTES} bytes, not {}", raw.len())))
}

/// A fixed-size filter for about `capacity` ids at `bits_per_id` bits each.
#[pyclass(module = "mwcore_native")]
pub struct Bloom {
    words: Vec<u64>,
    mask: u64,
    hashes: u64,
    #[pyo3(get)]
    capacity: usize,
    #[pyo3(get)]
    count: usize,
}

impl Bloom {
    /// The first position of an id and the step between its positions.
    fn start_and_step(id: &[u8; ID_BYTES]) -> (u64, u64) {
        let lo = u64::from_le_bytes(id[..8].try_into().expect("8 bytes"));
        let hi = u64::from_le_bytes(id[8..].try_into().expect("8 bytes"));
        let h1 = mix(lo ^ mix(hi));
        (h1, mix(h1) | 1)
    }

    fn add(&mut self, id: &[u8; ID_BYTES]) {
        let (h1, h2) = Self::start_and_step(id);
        for j in 0..self.hashes {
            let pos = h1.wrapping_add(j.wrapping_mul(h2)) & self.mask;
            self.words[(pos >> 6) as usize] |= 1u64 << (pos & 63);
        }
    }

    fn maybe(&self, id: &[u8; ID_BYTES]) -> bool {
        let (h1, h2) = Self::start_and_step(id);
        (0..self.hashes).all(|j| {
            let pos = h1.wrapping_add(j.wrapping_mul(h2)) & self.mask;
            self.words[(pos >> 6) as usize] >> (pos & 63) & 1 == 1
        })
    }
}

#[pymethods]
impl Bloom {
    #[new]
    #[pyo3(signature = (capacity = 100_000, bits_per_id = 12, hashes = 7))]
    fn new(capacity: usize, bits_per_id: usize, hashes: u64) -> Self {
        let bits = (capacity * bits_per_id).max(1 << 16).next_power_of_two();
        Bloom {
            words: vec![0; bits / 64],
            mask: bits as u64 - 1,
            hashes,
            capacity,
            count: 0,
        }
    }

    #[getter]
    fn full(&self) -> bool {
        self.count > self.capacity
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.words.len() * 8
    }

    fn add_many(&mut self, keys: &Bound<'_, PyAny>) -> PyResult<()> {
        for key in keys.try_iter()? {
            self.add(id_of(&key?)?);
            self.count += 1;
        }
        Ok(())
    }

    fn contains_many(&self, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        keys.try_iter()?
            .map(|key| Ok(self.maybe(id_of(&key?)?)))
            .collect()
    }

    /// Per id: a duplicate for certain (in `in_batch`, or earlier in `rids`), and the
    /// indexes of those the filter cannot rule out (the store decides those).
    fn duplicates(
        &self,
        rids: &Bound<'_, PyList>,
        in_batch: &Bound<'_, PySet>,
    ) -> PyResult<(Vec<bool>, Vec<usize>)> {
        let mut result = vec![false; rids.len()];
        let mut check = Vec::new();
        let mut seen_here: HashSet<[u8; ID_BYTES]> = HashSet::with_capacity(rids.len());
        for (i, rid) in rids.iter().enumerate() {
            let id = id_of(&rid)?;
            if !seen_here.insert(*id) || in_batch.contains(&rid)? {
                result[i] = true;
            } else if self.maybe(id) {
                check.push(i);
            }
        }
        Ok((result, check))
    }

    /// The filter's words, little-endian (the reference's `_words.tobytes()`).
    fn words<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let raw: Vec<u8> = self.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        PyBytes::new(py, &raw)
    }
}

#[cfg(test)]
mod tests {
    use pyo3::types::{PyBytes, PyList, PySet};

    use super::*;
    use crate::api::ids::derive;
    use crate::serde::testing::{hex, with_python};

    const KEYS: [&str; 3] = [
        "000102030405060708090a0b0c0d0e0f",
        "00000000000000000000000000000000",
        "ffffffffffffffffffffffffffffffff",
    ];

    fn id(h: &str) -> [u8; ID_BYTES] {
        hex(h).try_into().unwrap()
    }

    fn positions(f: &Bloom, id: &[u8; ID_BYTES]) -> Vec<u64> {
        let (h1, h2) = Bloom::start_and_step(id);
        (0..f.hashes)
            .map(|j| h1.wrapping_add(j.wrapping_mul(h2)) & f.mask)
            .collect()
    }

    /// The filter's non-zero words, by index.
    fn nonzero(f: &Bloom) -> Vec<(usize, u64)> {
        f.words
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, w)| w != 0)
            .collect()
    }

    // The vectors: `mwcore.runtime.bloom.BloomFilter` (numpy), run once:
    // `len(BloomFilter(c, b, h).words()) // 8`, `f._positions([key])[0]`, and the non-zero
    // words of `np.frombuffer(f.words(), np.uint64)` after `f.add_many(keys)`.

    #[test]
    fn the_size_is_the_references() {
        for (capacity, bits_per_id, hashes, words) in [
            (0, 12, 7, 1024), // at least 2**16 bits
            (1000, 12, 7, 1024),
            (8192, 16, 7, 2048), // 2**17 bits exactly
            (10_000, 10, 3, 2048),
            (100_000, 12, 7, 32768),
        ] {
            let f = Bloom::new(capacity, bits_per_id, hashes);
            assert_eq!(f.words.len(), words, "Bloom({capacity}, {bits_per_id}, {hashes})");
            assert_eq!(f.nbytes(), words * 8);
        }
    }

    #[test]
    fn the_positions_are_the_references() {
        let f = Bloom::new(1000, 12, 7);
        let want: [[u64; 7]; 3] = [
            [64495, 9010, 19061, 29112, 39163, 49214, 59265],
            [32367, 15616, 64401, 47650, 30899, 14148, 62933],
            [31030, 46913, 62796, 13143, 29026, 44909, 60792],
        ];
        for (key, want) in KEYS.iter().zip(want) {
            assert_eq!(positions(&f, &id(key)), want, "{key}");
        }
        let f = Bloom::new(10_000, 10, 3);
        let want: [[u64; 3]; 3] = [[64495, 9010, 84597], [97903, 15616, 64401], [31030, 46913, 62796]];
        for (key, want) in KEYS.iter().zip(want) {
            assert_eq!(positions(&f, &id(key)), want, "{key}");
        }
    }

    #[test]
    fn the_words_are_the_references() {
        let mut f = Bloom::new(1000, 12, 7);
        for key in KEYS {
            f.add(&id(key));
        }
        let want: Vec<(usize, u64)> = vec![
            (140, 0x4000000000000),
            (205, 0x800000),
            (221, 0x10),
            (244, 0x1),
            (297, 0x20000000000000),
            (453, 0x400000000),
            (454, 0x100000000000000),
            (482, 0x8000000000000),
            (484, 0x40000000000000),
            (505, 0x800000000000),
            (611, 0x800000000000000),
            (701, 0x200000000000),
            (733, 0x2),
            (744, 0x400000000),
            (768, 0x4000000000000000),
            (926, 0x2),
            (949, 0x100000000000000),
            (981, 0x1000),
            (983, 0x200000),
            (1006, 0x20000),
            (1007, 0x800000000000),
        ];
        assert_eq!(nonzero(&f), want);

        let mut f = Bloom::new(10_000, 10, 3);
        for key in KEYS {
            f.add(&id(key));
        }
        let want: Vec<(usize, u64)> = vec![
            (140, 0x4000000000000),
            (244, 0x1),
            (484, 0x40000000000000),
            (733, 0x2),
            (981, 0x1000),
            (1006, 0x20000),
            (1007, 0x800000000000),
            (1321, 0x20000000000000),
            (1529, 0x800000000000),
        ];
        assert_eq!(nonzero(&f), want);
    }

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let mut f = Bloom::new(10_000, 12, 7);
        let added: Vec<_> = (0..10_000).map(|i| derive(b"added", i)).collect();
        for rid in &added {
            f.add(rid);
        }
        assert!(
            added.iter().all(|rid| f.maybe(rid)),
            "an id added is always a maybe"
        );
        let fresh = (0..10_000)
            .filter(|&i| f.maybe(&derive(b"never added", i)))
            .count();
        // 12 bits an id (131072 bits for 10000 ids), 7 hashes: about 0.2% expected
        assert!(fresh < 100, "{fresh} false positives in 10000");
        assert!(fresh > 0, "no false positive at all: the filter is not one");
    }

    #[test]
    fn through_python_count_full_words_and_duplicates() {
        with_python(|py| {
            let keys: Vec<_> = KEYS.iter().map(|k| PyBytes::new(py, &hex(k))).collect();
            let mut f = Bloom::new(2, 12, 7);
            f.add_many(&PyList::new(py, &keys[..2]).unwrap()).unwrap();
            assert_eq!((f.count, f.full()), (2, false)); // the reference: `count > capacity`
            f.add_many(&PyList::new(py, &keys[2..]).unwrap()).unwrap();
            assert_eq!((f.count, f.full()), (3, true));

            // The same filter as the reference's after `add_many(keys)`, as bytes
            // (`_words.tobytes()`, little-endian): its digest is BLAKE2b-128 of those.
            let mut g = Bloom::new(1000, 12, 7);
            g.add_many(&PyList::new(py, &keys).unwrap()).unwrap();
            let words = g.words(py);
            assert_eq!(words.as_bytes().len(), 8192);
            let digest = blake2b_simd::Params::new().hash_length(16).hash(words.as_bytes());
            assert_eq!(digest.as_bytes(), hex("0eaa926223411953a9038d02a6b46368"));

            // The reference's `duplicates([k0, k2, k0, k1, k3], {k3})` after `add_many([k0, k1])`.
            let k3 = PyBytes::new(py, &hex("0102030405060708090a0b0c0d0e0f10"));
            let mut h = Bloom::new(1000, 12, 7);
            h.add_many(&PyList::new(py, &keys[..2]).unwrap()).unwrap();
            let rids = PyList::new(py, [&keys[0], &keys[2], &keys[0], &keys[1], &k3]).unwrap();
            let in_batch = PySet::new(py, [&k3]).unwrap();
            let (dup, check) = h.duplicates(&rids, &in_batch).unwrap();
            assert_eq!(dup, [false, false, true, false, true]);
            assert_eq!(check, [0, 3]);
            let maybe = h.contains_many(&PyList::new(py, &keys).unwrap()).unwrap();
            assert_eq!(maybe, [true, true, false]);
        });
    }

    #[test]
    fn an_id_of_another_size_is_refused() {
        with_python(|py| {
            let mut f = Bloom::new(1000, 12, 7);
            let short = PyList::new(py, [PyBytes::new(py, &[0; 15])]).unwrap();
            let err = f.add_many(&short).unwrap_err();
            assert!(err.is_instance_of::<PyValueError>(py));
            assert_eq!(err.value(py).to_string(), "a record id is 16 bytes, not 15");
            let not_bytes = PyList::new(py, ["0123456789abcdef"]).unwrap();
            assert!(f
                .add_many(&not_bytes)
                .unwrap_err()
                .is_instance_of::<pyo3::exceptions::PyTypeError>(py));
            assert_eq!(f.count, 0);
        });
    }
}
