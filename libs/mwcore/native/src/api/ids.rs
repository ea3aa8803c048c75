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
