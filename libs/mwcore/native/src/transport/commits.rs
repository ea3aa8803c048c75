//! Asynchronous commits of a group consumer answered on a queue of their own
//! (librdkafka's `rd_kafka_commit_queue`), read by each poll: every commit's outcome
//! reaches the runtime (librdkafka's commit event on the consumer's main queue did
//! not reach rust-rdkafka's `commit_callback` here).

use rdkafka::bindings;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::TopicPartitionList;

pub type Committed = (String, i32, i64, Option<String>); // topic, partition, offset, metadata

/// The queue asynchronous commits answer on (librdkafka's `rd_kafka_commit_queue`): served
/// by each poll, so every commit's outcome reaches `on_committed`.
pub struct CommitQueue(*mut bindings::rd_kafka_queue_t);

// SAFETY: librdkafka's queues are thread-safe; the pointer lives as long as the consumer.
unsafe impl Send for CommitQueue {}
unsafe impl Sync for CommitQueue {}

/// What a commit answer (an `OFFSET_COMMIT` event) says: its error, and the offsets
/// written (a part that failed left out).
///
/// # Safety
/// `event` is a live `OFFSET_COMMIT` event.
unsafe fn commit_answer(event: *mut bindings::rd_kafka_event_t) -> (Option<String>, Vec<Committed>) {
    let err = bindings::rd_kafka_event_error(event);
    let error = (err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR).then(|| {
        let name = bindings::rd_kafka_err2str(err);
        std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned()
    });
    let list = bindings::rd_kafka_event_topic_partition_list(event);
    let out = if list.is_null() {
        Vec::new()
    } else {
        listed(list, true)
    };
    (error, out)
}

/// The elements of `list` (`failed`: but those with an error), each one's metadata read
/// as UTF-8 where it is (any other bytes replaced: Kafka keeps whatever a client
/// committed, and the witness reads such metadata as no witness of its own).
///
/// # Safety
/// `list` is a live topic-partition list.
pub unsafe fn listed(list: *const bindings::rd_kafka_topic_partition_list_t, failed: bool) -> Vec<Committed> {
    let n = usize::try_from((*list).cnt).unwrap_or(0);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let e = &*(*list).elems.add(i);
        if failed && e.err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            continue;
        }
        let topic = std::ffi::CStr::from_ptr(e.topic).to_string_lossy().into_owned();
        let meta = if e.metadata.is_null() || e.metadata_size == 0 {
            None
        } else {
            let raw = std::slice::from_raw_parts(e.metadata as *const u8, e.metadata_size);
            Some(String::from_utf8_lossy(raw).into_owned())
        };
        out.push((topic, e.partition, e.offset, meta));
    }
    out
}

impl CommitQueue {
    /// A queue of `consumer`'s client, destroyed with it.
    pub fn new<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Self {
        // SAFETY: the client is live; the queue is destroyed once (Drop).
        CommitQueue(unsafe { bindings::rd_kafka_queue_new(consumer.client().native_ptr()) })
    }

    /// Commit `tpl` asynchronously, its answer to this queue.
    pub fn commit<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        tpl: &TopicPartitionList,
    ) -> KafkaResult<()> {
        // SAFETY: the list and the queue are live for the call (librdkafka copies the list).
        let err = unsafe {
            bindings::rd_kafka_commit_queue(
                consumer.client().native_ptr(),
                tpl.ptr(),
                self.0,
                None,
                std::ptr::null_mut(),
            )
        };
        if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(KafkaError::ConsumerCommit(err.into()));
        }
        Ok(())
    }

    /// The answers that have arrived: each commit's error, and the offsets it wrote.
    pub fn answers(&self) -> Vec<(Option<String>, Vec<Committed>)> {
        let mut answers = Vec::new();
        loop {
            // SAFETY: the queue is live; each event is destroyed once read.
            let event = unsafe { bindings::rd_kafka_queue_poll(self.0, 0) };
            if event.is_null() {
                break;
            }
            unsafe {
                if bindings::rd_kafka_event_type(event) == bindings::RD_KAFKA_EVENT_OFFSET_COMMIT {
                    answers.push(commit_answer(event));
                }
                bindings::rd_kafka_event_destroy(event);
            }
        }
        answers
    }
}

impl Drop for CommitQueue {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once here.
        unsafe { bindings::rd_kafka_queue_destroy(self.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list of one partition whose metadata is `raw` (set as librdkafka sets it from a
    /// broker's answer: bytes it allocated, which the list frees).
    fn with_metadata(raw: &[u8]) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("in", 3, rdkafka::Offset::Offset(42))
            .unwrap();
        // SAFETY: the list is live; its element's metadata is replaced by a malloc'd copy
        // of `raw`, freed by the list's destructor as librdkafka's own is.
        unsafe {
            let elem = &mut *(*tpl.ptr()).elems;
            let buf = libc_malloc(raw.len());
            std::ptr::copy_nonoverlapping(raw.as_ptr(), buf.cast::<u8>(), raw.len());
            elem.metadata = buf;
            elem.metadata_size = raw.len();
        }
        tpl
    }

    extern "C" {
        #[link_name = "malloc"]
        fn libc_malloc(size: usize) -> *mut std::ffi::c_void;
    }

    #[test]
    fn metadata_that_is_not_utf8_is_read_with_its_bytes_replaced() {
        // (rdkafka's `elements()[i].metadata()` panics on it: "Metadata is not UTF-8")
        let tpl = with_metadata(b"\xff\xfe\x00mw:7");
        let got = unsafe { listed(tpl.ptr(), false) };
        assert_eq!(
            got,
            vec![(
                "in".to_owned(),
                3,
                42,
                Some("\u{fffd}\u{fffd}\u{0}mw:7".to_owned())
            )]
        );
    }

    #[test]
    fn utf8_metadata_is_read_as_it_is_and_none_is_none() {
        let tpl = with_metadata("mw:12:ünï".as_bytes());
        assert_eq!(
            unsafe { listed(tpl.ptr(), false) }[0].3.as_deref(),
            Some("mw:12:ünï")
        );
        let mut bare = TopicPartitionList::new();
        bare.add_partition("in", 0);
        assert_eq!(unsafe { listed(bare.ptr(), false) }[0].3, None);
    }
}
