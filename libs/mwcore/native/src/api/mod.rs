//! The public API's values made in Rust (reference: `mwcore.api`): record ids, the
//! pipeline secret's MACs, and the kit's value types built without a Python call.

pub mod ids;
pub mod objects;
pub mod shared;
pub mod signing;
