//! The Bloom filter of record ids (reference: `mwcore/runtime/bloom.py`), bit for bit:
//! the same mixing (splitmix64), the same positions, the same words.

use foldhash::{HashSet, HashSetExt};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PySet};

const ID_BYTES: usize = 16;

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
