//! The per-record path in Rust (reference: `mwcore.runtime`): the envelope (ids, late
//! marks), the screening of a chunk, the dedup filter, the timer queue, and user code's
//! context and effects.

pub mod bloom;
pub mod context;
pub mod effects;
pub mod envelope;
pub mod screening;
pub mod timers;
