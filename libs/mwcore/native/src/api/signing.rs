//! Record ids authenticated with the pipeline secret (reference: `mwcore.api.signing`):
//! an id's MAC is keyed BLAKE2b, personalised `mw-id`.

use blake2b_simd::Params;

/// `mwcore.api.signing.MAC_BYTES`.
const MAC_BYTES: usize = 16;

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
