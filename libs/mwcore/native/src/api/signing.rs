//! Record ids authenticated with the pipeline secret (reference: `mwcore.api.signing`):
//! a MAC is keyed BLAKE2b. Version 1 (16 bytes, personalised `mw-id`) covers the id;
//! version 2 (`02` and 16 bytes, personalised `mw-rec2`) the id, the topic and a digest
//! of the key and the Avro body (`record_digest`).

use blake2b_simd::{Hash, Params};

/// `mwcore.api.signing.MAC_BYTES`.
pub const MAC_BYTES: usize = 16;
/// `mwcore.api.signing.MAC_V2`: the first byte of a version-2 MAC.
pub const MAC_V2: u8 = 2;
const NO_KEY: u32 = 0xFFFF_FFFF;

/// Where a value's Avro body starts (`mwcore.serde.framing.frame_of`): after the
/// Confluent prefix (`00` and a 4-byte id) or the single-object one (`C3 01` and an
/// 8-byte fingerprint); at 0 in neither.
fn body_start(value: &[u8]) -> usize {
    if value.len() >= 5 && value[0] == 0 {
        5
    } else if value.len() >= 10 && value[..2] == [0xC3, 0x01] {
        10
    } else {
        0
    }
}

/// `mwcore.api.signing.record_digest`: the topic (length-prefixed) and the digest of the
/// key (length-prefixed, `NO_KEY` for none) and the body.
fn record_digest(topic: &[u8], key: Option<&[u8]>, value: &[u8]) -> Vec<u8> {
    let mut state = Params::new().hash_length(32).personal(b"mw-content").to_state();
    match key {
        Some(k) => state.update(&(k.len() as u32).to_be_bytes()).update(k),
        None => state.update(&NO_KEY.to_be_bytes()),
    };
    state.update(&value[body_start(value)..]);
    let mut out = Vec::with_capacity(2 + topic.len() + 32);
    out.extend_from_slice(&(topic.len() as u16).to_be_bytes());
    out.extend_from_slice(topic);
    out.extend_from_slice(state.finalize().as_bytes());
    out
}

fn id_hash(secret: &[u8], rid: &[u8]) -> Hash {
    Params::new()
        .hash_length(MAC_BYTES)
        .key(secret)
        .personal(b"mw-id")
        .hash(rid)
}

fn record_hash(secret: &[u8], rid: &[u8], topic: &[u8], key: Option<&[u8]>, value: &[u8]) -> Hash {
    let mut state = Params::new()
        .hash_length(MAC_BYTES)
        .key(secret)
        .personal(b"mw-rec2")
        .to_state();
    state.update(rid).update(&record_digest(topic, key, value));
    state.finalize()
}

/// `Signer.sign_id(rid)`: a version-1 MAC.
pub fn id_mac(secret: &[u8], rid: &[u8]) -> Vec<u8> {
    id_hash(secret, rid).as_bytes().to_vec()
}

/// `Signer.sign_record(rid, topic, key, value)`: a version-2 MAC (`02` and 16 bytes).
pub fn record_mac(secret: &[u8], rid: &[u8], topic: &[u8], key: Option<&[u8]>, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAC_BYTES + 1);
    out.push(MAC_V2);
    out.extend_from_slice(record_hash(secret, rid, topic, key, value).as_bytes());
    out
}

/// `Signer.verify_record(rid, topic, key, value, mac)` with the signer's key; a version-1
/// MAC verifies only where `accept_v1`. (blake2b_simd's `Hash` compares in constant time.)
pub fn record_verifies(
    secret: &[u8],
    rid: &[u8],
    topic: &[u8],
    key: Option<&[u8]>,
    value: &[u8],
    mac: Option<&[u8]>,
    accept_v1: bool,
) -> bool {
    let Some(mac) = mac else { return false };
    if mac.len() == MAC_BYTES + 1 && mac[0] == MAC_V2 {
        return record_hash(secret, rid, topic, key, value) == mac[1..];
    }
    mac.len() == MAC_BYTES && accept_v1 && verifies(secret, rid, Some(mac))
}

/// `Signer.verify_id(rid, mac)` with the signer's key.
pub fn verifies(key: &[u8], rid: &[u8], mac: Option<&[u8]>) -> bool {
    mac.is_some_and(|mac| id_hash(key, rid) == *mac)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serde::testing::hex;

    // From `mwcore.api.signing`, run once: `s = Signer("a-pipeline-secret-of-some-length")`,
    // KEY = `s.mac_key.hex()`, each MAC = `s.sign_id(rid).hex()`.
    const KEY: &str = "8e5607c2e02bed45ca78cecfcdd919b6f04fbc9b4ac71e364bfdeef584c787dc";
    const SIGNED: [(&str, &str); 3] = [
        (
            "000102030405060708090a0b0c0d0e0f",
            "b011299960e315054b29cf8d9ec3c567",
        ),
        (
            "00000000000000000000000000000000",
            "5bb6d82abd0a9e45adae8b88a0f61953",
        ),
        ("", "ca3ae9c52374f5de82e58a6b283965fd"),
    ];

    #[test]
    fn the_references_macs_verify() {
        for (rid, mac) in SIGNED {
            assert!(verifies(&hex(KEY), &hex(rid), Some(&hex(mac))), "rid {rid:?}");
        }
    }

    // `s.sign_record(bytes(range(16)), topic, key, value).hex()`, as above.
    const RECORDS: [(&str, Option<&str>, &str, &str); 3] = [
        (
            "t.numbers",
            Some("6b31"),
            "000000000702",
            "0248953a5f2fa1c9ad5ef8a1d5a3f04f8f",
        ),
        (
            "t.numbers",
            None,
            "c301000000000000000002",
            "0231fb0abbe29c98f070f3a39f91341918",
        ),
        (
            "other",
            Some(""),
            "726177206279746573",
            "0204ed4abc6f7d474d4cb0a1dc9233a3dc",
        ),
    ];

    #[test]
    fn the_references_record_macs_verify_and_bind_topic_key_and_body() {
        let (key, rid) = (hex(KEY), hex(SIGNED[0].0));
        for (topic, rkey, value, mac) in RECORDS {
            let (rkey, value, mac) = (rkey.map(hex), hex(value), hex(mac));
            let ok = |t: &str, k: Option<&[u8]>, v: &[u8], m: &[u8]| {
                record_verifies(&key, &rid, t.as_bytes(), k, v, Some(m), false)
            };
            assert!(ok(topic, rkey.as_deref(), &value, &mac), "{topic} {value:?}");
            assert!(!ok("elsewhere", rkey.as_deref(), &value, &mac), "another topic");
            assert!(!ok(topic, Some(b"other"), &value, &mac), "another key");
            let mut changed = value.clone();
            *changed.last_mut().unwrap() ^= 1;
            assert!(!ok(topic, rkey.as_deref(), &changed, &mac), "another body");
        }
        // the framing is not covered: the same body under another schema id verifies
        let (topic, rkey, value, mac) = RECORDS[0];
        let mut reframed = hex(value);
        reframed[4] = 9;
        let rkey = rkey.map(hex);
        assert!(record_verifies(
            &key,
            &rid,
            topic.as_bytes(),
            rkey.as_deref(),
            &reframed,
            Some(&hex(mac)),
            false
        ));
    }

    #[test]
    fn a_version_1_mac_verifies_only_where_accepted() {
        let (key, rid, mac) = (hex(KEY), hex(SIGNED[0].0), hex(SIGNED[0].1));
        assert!(!record_verifies(&key, &rid, b"t", None, b"", Some(&mac), false));
        assert!(record_verifies(&key, &rid, b"t", None, b"", Some(&mac), true));
        assert!(!record_verifies(&key, &rid, b"t", None, b"", None, true));
    }

    #[test]
    fn a_wrong_mac_does_not_verify() {
        let (key, rid, mac) = (hex(KEY), hex(SIGNED[0].0), hex(SIGNED[0].1));
        assert!(!verifies(&key, &rid, None), "no MAC");
        for bit in [0, 7, 64, 127] {
            let mut flipped = mac.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert!(!verifies(&key, &rid, Some(&flipped)), "bit {bit} flipped");
        }
        assert!(!verifies(&key, &rid, Some(&mac[..15])), "a MAC cut short");
        assert!(
            !verifies(&key, &rid, Some(&[mac.as_slice(), &[0]].concat())),
            "a MAC too long"
        );
        assert!(!verifies(&key, &rid, Some(&[])), "an empty MAC");
        assert!(!verifies(&key, &hex(SIGNED[1].0), Some(&mac)), "another id's MAC");
        let mut other_key = key.clone();
        other_key[31] ^= 1;
        assert!(!verifies(&other_key, &rid, Some(&mac)), "another key");
    }
}
