//! The group's side of a native consumer (`consumer.rs`): the runtime's callbacks, and
//! what a rebalance does with them. An assignment asks `on_assign` where each partition
//! starts (its checkpoint's position, never the group's committed offset: semantics
//! I-2), routes the partitions' messages (`fetched.rs`), then assigns and resumes them;
//! a revocation calls `on_revoke` (or `on_lost`, when the group took them away) and
//! unassigns. An exception of a callback is kept for the call that polled, and an
//! assignment whose starts it could not get is not made; while closing, no assignment
//! is taken.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rdkafka::consumer::{BaseConsumer, Consumer as _, ConsumerContext};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::transport::fetched::Route;
use crate::transport::kafka::{failure, Part};

pub struct Callbacks {
    pub on_assign: Py<PyAny>,
    pub on_revoke: Py<PyAny>,
    pub on_lost: Py<PyAny>,
}

pub struct Membership {
    pub callbacks: Mutex<Option<Callbacks>>,
    pub closing: AtomicBool, // set by close: an assignment still waiting in the queue is not taken
    pub on_committed: Option<Py<PyAny>>,
    pub raised: Mutex<Option<PyErr>>, // a callback's exception, raised by the call that polled
    pub route: Route,                 // where assigned partitions' messages go (`fetched.rs`)
}

impl Membership {
    fn keep(&self, err: PyErr) {
        let mut raised = self.raised.lock().expect("raised");
        if raised.is_none() {
            *raised = Some(err);
        }
    }

    /// Ask `on_assign` where each part starts and set it in `tpl`.
    fn starts(
        &self,
        py: Python<'_>,
        cbs: &Callbacks,
        parts: &[Part],
        tpl: &mut TopicPartitionList,
    ) -> PyResult<()> {
        let starts = cbs.on_assign.call1(py, (parts.to_vec(),))?;
        let starts = starts.bind(py).downcast::<PyDict>()?.clone();
        for (topic, partition) in parts {
            let Some(offset) = starts.get_item((topic.as_str(), *partition))? else {
                return Err(PyException::new_err(format!(
                    "on_assign gave no start for {topic}[{partition}]"
                )));
            };
            tpl.set_partition_offset(topic, *partition, Offset::from_raw(offset.extract::<i64>()?))
                .map_err(|e| failure(&e))?;
        }
        Ok(())
    }
}

impl ClientContext for Membership {}

impl ConsumerContext for Membership {
    fn rebalance(&self, base: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let parts: Vec<Part> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_owned(), e.partition()))
            .collect();
        let assigning = err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
        if assigning && self.closing.load(Ordering::SeqCst) {
            let _ = base.unassign(); // on_assign acquires intervals: never while closing
            return;
        }
        let revoking = err == RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS;
        let lost = revoking && base.assignment_lost();
        let ok = Python::with_gil(|py| {
            let cbs = self.callbacks.lock().expect("callbacks");
            let Some(cbs) = cbs.as_ref() else {
                return true;
            };
            let done = if assigning {
                self.starts(py, cbs, &parts, tpl)
            } else if lost {
                cbs.on_lost.call1(py, (parts.clone(),)).map(|_| ())
            } else if revoking {
                cbs.on_revoke.call1(py, (parts.clone(),)).map(|_| ())
            } else {
                Ok(())
            };
            match done {
                Ok(()) => true,
                Err(e) => {
                    self.keep(e);
                    false
                }
            }
        });
        if assigning {
            if ok {
                // SAFETY: the client is live (it calls us); the route's queue is cleared
                // before the consumer destroys it.
                unsafe { self.route.parts(base.client().native_ptr(), &parts) };
                let _ = base.assign(tpl);
                // A partition paused when its interval was fenced stays paused in
                // librdkafka across a revoke and a new assignment.
                let _ = base.resume(tpl);
            }
        } else {
            let _ = base.unassign();
        }
    }
}
