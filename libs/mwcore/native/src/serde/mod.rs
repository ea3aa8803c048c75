//! Avro in Rust (reference: `mwcore.serde`): the decoder of input values, the encoder
//! of productions, and the table of the short strings that recur in the input.

pub mod avro;
pub mod encode;
pub mod strings;
#[cfg(test)]
pub(crate) mod testing;
