//! Deterministic record ids (reference: `mwcore.api.ids`; semantics I-3): what a record
//! or a timer firing causes gets ids derived from it, so a re-execution re-emits them.

use blake2b_simd::Params;

/// `mwcore.api.ids.ID_BYTES`.
pub const ID_BYTES: usize = 16;

fn fixed(hash: &[u8]) -> [u8; ID_BYTES] {
    let mut out = [0u8; ID_BYTES];
    out.copy_from_slice(hash);
    out
}

/// `ids.derive(cause, index)`: the id of the `index`-th effect caused by `cause`.
pub fn derive(cause: &[u8], index: u32) -> [u8; ID_BYTES] {
    let hash = Params::new()
        .hash_length(ID_BYTES)
        .to_state()
        .update(cause)
        .update(&index.to_be_bytes())
        .finalize();
    fixed(hash.as_bytes())
}

/// `ids.timer_firing_id(set_id, tag, timestamp)`: the identity of one firing.
pub fn timer_firing_id(set_id: &[u8], tag: &str, timestamp: i64) -> [u8; ID_BYTES] {
    let hash = Params::new()
        .hash_length(ID_BYTES)
        .personal(b"mw-timer")
        .to_state()
        .update(set_id)
        .update(tag.as_bytes())
        .update(b"\x00")
        .update(&timestamp.to_be_bytes())
        .finalize();
    fixed(hash.as_bytes())
}

/// `ids.from_position(topic, partition, offset)`: the id of a record that came without one.
pub fn from_position(topic: &str, partition: i32, offset: i64) -> [u8; ID_BYTES] {
    let payload = format!("{topic}\x00{partition}\x00{offset}");
    let hash = Params::new()
        .hash_length(ID_BYTES)
        .personal(b"mw-offset")
        .hash(payload.as_bytes());
    fixed(hash.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serde::testing::hex;

    // Every vector: `mwcore.api.ids` (hashlib.blake2b, Python 3.11.7), run once, e.g.
    // `python -c 'from mwcore.api import ids; print(ids.derive(bytes(range(16)), 0).hex())'`.

    #[test]
    fn derive_is_the_reference() {
        let vectors = [
            (
                "000102030405060708090a0b0c0d0e0f",
                0,
                "3c835e122005224a9c2d2b7898981d23",
            ),
            (
                "ffffffffffffffffffffffffffffffff",
                7,
                "712590877ae4638a783fbb0d5a66a136",
            ),
            (
                "00000000000000000000000000000000",
                256,
                "b8e5214bebd4a5ae2e9228340a01d0dc",
            ),
            ("616263", u32::MAX, "7abca4ad738af432038ab4a79e13d15c"),
        ];
        for (cause, index, want) in vectors {
            assert_eq!(
                derive(&hex(cause), index).to_vec(),
                hex(want),
                "derive({cause}, {index})"
            );
        }
    }

    #[test]
    fn timer_firing_id_is_the_reference() {
        let vectors = [
            (
                "000102030405060708090a0b0c0d0e0f",
                "window",
                1_700_000_000_000,
                "21356c7cd9e88b1855a26ea9c6277eae",
            ),
            ("", "", 0, "3b635cad083aea666c69214857b9f811"),
            (
                "01010101010101010101010101010101",
                "ünï",
                -1,
                "3cec999941b5ef63e591bd516f3cd4d2",
            ),
            (
                "00000000000000000000000000000000",
                "t",
                i64::MIN,
                "23b9b50d171c898938d2a5c0290dd164",
            ),
            (
                "00000000000000000000000000000000",
                "t",
                i64::MAX,
                "db6d7dc5ff8a6c32067b1df0f5ac51b1",
            ),
        ];
        for (set_id, tag, ts, want) in vectors {
            let got = timer_firing_id(&hex(set_id), tag, ts);
            assert_eq!(
                got.to_vec(),
                hex(want),
                "timer_firing_id({set_id}, {tag:?}, {ts})"
            );
        }
    }

    #[test]
    fn from_position_is_the_reference() {
        let vectors = [
            ("clicks", 3, 12345, "24a5b87cf8e466fd8d248a42ebdf481f"),
            ("", 0, 0, "09fe3a64b28546fdf11be7334a92e922"),
            ("ünï", -1, -5, "7423f0483c7385e9cdc63c37bc1b5a25"),
            ("t", i32::MAX, i64::MAX, "5cf595cb358d2b10c85f59716e5be5ca"),
        ];
        for (topic, partition, offset, want) in vectors {
            let got = from_position(topic, partition, offset);
            assert_eq!(
                got.to_vec(),
                hex(want),
                "from_position({topic:?}, {partition}, {offset})"
            );
        }
    }
}
