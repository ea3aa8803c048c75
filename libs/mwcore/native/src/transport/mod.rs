//! Kafka on librdkafka (reference: `mwcore.transport`): the group consumer, its
//! messages and polls, and the producer of the worker's productions.

pub mod commits;
pub mod consumer;
pub mod fetched;
pub mod kafka;
pub mod membership;
pub mod message;
pub mod polled;
pub mod produce;
pub mod producer;
