//! A group consumer's fetched messages on a queue of their own (`MW_NATIVE_BATCH_POLL`),
//! taken a poll at a time in one call (librdkafka's `rd_kafka_consume_batch_queue`)
//! rather than one call a message on the consumer's queue, where each call takes the
//! queue's lock, reads the clock twice and wraps the message in an event (measured in
//! CHANGELOG.md's measured history, 2026-11-29).
//!
//! Each partition's messages are routed here when it is assigned, before it fetches
//! (librdkafka keeps a route the application set across later assignments), so all of
//! a partition's messages come this way, in order. The consumer's own queue keeps the
//! group's events (rebalances, errors, commits), still served by each poll. A message
//! made stale by a seek, a pause or a revocation is dropped here as it is there
//! (librdkafka's op versions).

use std::ffi::CString;
use std::sync::atomic::{AtomicPtr, Ordering};

use rdkafka::bindings::{
    rd_kafka_consume_batch_queue, rd_kafka_message_destroy, rd_kafka_message_t, rd_kafka_queue_destroy,
    rd_kafka_queue_forward, rd_kafka_queue_get_partition, rd_kafka_queue_new, rd_kafka_queue_t, rd_kafka_t,
};

use crate::transport::polled::Polled;

/// The queue, owned by the consumer (destroyed before its client).
pub struct Fetched(*mut rd_kafka_queue_t);

// SAFETY: librdkafka's queues are thread-safe; the pointer lives as long as the consumer.
unsafe impl Send for Fetched {}
unsafe impl Sync for Fetched {}

impl Fetched {
    /// A queue of the client `rk`.
    ///
    /// # Safety
    /// `rk` is a live client that outlives the queue.
    pub unsafe fn new(rk: *mut rd_kafka_t) -> Self {
        Fetched(rd_kafka_queue_new(rk))
    }

    /// The pointer the group's rebalances route partitions to (`Route`).
    pub fn ptr(&self) -> *mut rd_kafka_queue_t {
        self.0
    }

    /// What has arrived, until `polled` holds `most` messages, waiting up to
    /// `timeout_ms` for a first one: each taken into `polled` (a message's error as its
    /// error), then destroyed.
    pub fn take(&self, polled: &mut Polled, most: usize, timeout_ms: i32) -> usize {
        let max = most.saturating_sub(polled.messages.len());
        if max == 0 {
            return 0;
        }
        let mut got: Vec<*mut rd_kafka_message_t> = Vec::with_capacity(max);
        // SAFETY: the queue is live; librdkafka writes at most `max` message pointers,
        // each then ours until destroyed (once, below).
        unsafe {
            let n = rd_kafka_consume_batch_queue(self.0, timeout_ms, got.as_mut_ptr(), max);
            got.set_len(usize::try_from(n).unwrap_or(0).min(max));
            for &m in &got {
                polled.take_raw(m);
                rd_kafka_message_destroy(m);
            }
        }
        got.len()
    }
}

impl Drop for Fetched {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once here; partitions routed to it keep a
        // reference of their own (librdkafka's forwarding).
        unsafe { rd_kafka_queue_destroy(self.0) };
    }
}

/// Where the group's rebalances route newly assigned partitions: the consumer's
/// `Fetched`, or nowhere (null: the consumer's own queue, as librdkafka does).
#[derive(Default)]
pub struct Route(AtomicPtr<rd_kafka_queue_t>);

impl Route {
    pub fn set(&self, queue: *mut rd_kafka_queue_t) {
        self.0.store(queue, Ordering::SeqCst);
    }

    /// Route each of `parts`' messages to the queue, if there is one; before they are
    /// assigned.
    ///
    /// # Safety
    /// `rk` is the live client; the queue set, if any, is live (the consumer clears the
    /// route before it destroys the queue).
    pub unsafe fn parts(&self, rk: *mut rd_kafka_t, parts: &[(String, i32)]) {
        let queue = self.0.load(Ordering::SeqCst);
        if queue.is_null() {
            return;
        }
        for (topic, partition) in parts {
            let Ok(name) = CString::new(topic.as_str()) else {
                continue; // no topic of an assignment has a NUL in its name
            };
            let own = rd_kafka_queue_get_partition(rk, name.as_ptr(), *partition);
            if !own.is_null() {
                rd_kafka_queue_forward(own, queue);
                rd_kafka_queue_destroy(own);
            }
        }
    }
}
