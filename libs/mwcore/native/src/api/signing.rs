//! Record ids authenticated with the pipeline secret (reference: `mwcore.api.signing`):
//! an id's MAC is keyed BLAKE2b, personalised `mw-id`.

use blake2b_simd::Params;

/// `mwcore.api.signing.MAC_BYTES`.
pub const MAC_BYTES: usize = 16;

/// `Signer.verify_id(rid, mac)` with the signer's key.
pub fn verifies(key: &[u8], rid: &[u8], mac: Option<&[u8]>) -> bool {
    let Some(mac) = mac else { return false };
    let want = Params::new()
        .hash_length(MAC_BYTES)
        .key(key)
        .personal(b"mw-id")
        .hash(rid);
    want == *mac // blake2b_simd's Hash compares in constant time
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
