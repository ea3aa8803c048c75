//! The checkpoint store's side (reference: `mwcore.store`): the checkpoint's wire
//! format and the RESP of the commit script's call.

pub mod checkpoint;
pub mod resp;
