//! The `Queue` without Python, against the reference's rules (`mwcore.runtime.timers`):
//! due timers by timestamp, then key, then tag, per domain; a (key, tag) set again
//! replaces its timer; `pop_due` gives only timers before its limit.

use std::collections::BTreeMap;

use super::{Queue, EVENT};
use crate::store::checkpoint::Entry;

const WALL: u8 = 1;
const HOLD: u8 = 2;

fn entry(key: &str, tag: &str, timestamp: i64, domain: u8) -> Entry {
    Entry {
        key: key.into(),
        tag: tag.into(),
        timestamp,
        domain,
        set_id: format!("{key}/{tag}@{timestamp}").into_bytes(),
    }
}

type Fields = (String, String, i64, u8, Vec<u8>);

fn fields(e: Entry) -> Fields {
    (e.key, e.tag, e.timestamp, e.domain, e.set_id)
}

/// Every timer of `domain` due before `limit`, popped, as (key, tag, timestamp).
fn drain(q: &mut Queue, domain: u8, limit: i64) -> Vec<(String, String, i64)> {
    std::iter::from_fn(|| q.pop_due(domain, limit))
        .map(|e| (e.key, e.tag, e.timestamp))
        .collect()
}

fn kt(key: &str, tag: &str, ts: i64) -> (String, String, i64) {
    (key.into(), tag.into(), ts)
}

#[test]
fn due_by_timestamp_then_key_then_tag() {
    let mut q = Queue::default();
    for (key, tag, ts) in [
        ("b", "y", 5),
        ("b", "x", 3),
        ("a", "z", 3),
        ("c", "a", 1),
        ("a", "a", 5),
    ] {
        q.set(entry(key, tag, ts, EVENT));
    }
    q.set(entry("ß", "t", 3, EVENT)); // after "b": by code point (and UTF-8 bytes) as Python
    q.set(entry("B", "t", 3, EVENT)); // before "a"
    q.set(entry("a", "y", i64::MIN, EVENT));
    assert_eq!(q.len(), 8);
    assert_eq!(q.oldest(EVENT), Some(i64::MIN));
    let want = [
        kt("a", "y", i64::MIN),
        kt("c", "a", 1),
        kt("B", "t", 3),
        kt("a", "z", 3),
        kt("b", "x", 3),
        kt("ß", "t", 3),
        kt("a", "a", 5),
        kt("b", "y", 5),
    ];
    assert_eq!(drain(&mut q, EVENT, i64::MAX), want);
    assert!(q.is_empty());
    assert_eq!(q.oldest(EVENT), None);
}

#[test]
fn setting_again_replaces() {
    let mut q = Queue::default();
    q.set(entry("k", "t", 10, EVENT));
    q.set(entry("k", "t", 2, EVENT)); // earlier
    q.set(entry("k", "u", 7, EVENT));
    q.set(entry("k", "u", 9, EVENT)); // later
    assert_eq!(q.len(), 2);
    assert_eq!(q.oldest(EVENT), Some(2));
    let got = q.pop_due(EVENT, 3).map(fields);
    assert_eq!(
        got,
        Some(("k".into(), "t".into(), 2, EVENT, b"k/t@2".to_vec())),
        "the latest setting's set_id"
    );
    assert_eq!(
        q.oldest(EVENT),
        Some(9),
        "the replaced settings at 7 and 10 are not timers"
    );
    assert_eq!(drain(&mut q, EVENT, i64::MAX), [kt("k", "u", 9)]);
    assert!(q.is_empty());

    // into another domain: gone from the first
    q.set(entry("k", "t", 1, EVENT));
    q.set(entry("k", "t", 4, WALL));
    assert_eq!(q.len(), 1);
    assert_eq!(q.oldest(EVENT), None);
    assert_eq!(drain(&mut q, WALL, 5), [kt("k", "t", 4)]);

    // the same setting twice is one timer
    q.set(entry("k", "t", 1, EVENT));
    q.set(entry("k", "t", 1, EVENT));
    assert_eq!(q.len(), 1);
    assert_eq!(drain(&mut q, EVENT, 2), [kt("k", "t", 1)]);
}

#[test]
fn clear_and_clear_all() {
    let mut q = Queue::default();
    q.set(entry("k", "t", 3, EVENT));
    q.set(entry("k", "u", 4, EVENT));
    q.set(entry("j", "t", 5, HOLD));
    let gone = q.clear("k", "t").map(fields);
    assert_eq!(gone, Some(("k".into(), "t".into(), 3, EVENT, b"k/t@3".to_vec())));
    assert!(q.clear("k", "t").is_none(), "cleared already");
    assert!(q.clear("nobody", "t").is_none() && q.clear("k", "nothing").is_none());
    assert_eq!(q.len(), 2);
    assert_eq!(q.oldest(EVENT), Some(4));
    assert_eq!(q.clear("k", "u").map(|e| e.timestamp), Some(4)); // the key's last tag
    assert_eq!(q.oldest(EVENT), None);
    assert_eq!(q.len(), 1);
    q.set(entry("k", "u", 8, EVENT)); // the key again, after its last tag went
    assert_eq!(q.len(), 2);
    q.clear_all();
    assert!(q.is_empty());
    for d in [EVENT, WALL, HOLD] {
        assert_eq!(q.oldest(d), None);
        assert!(q.pop_due(d, i64::MAX).is_none());
    }
    q.set(entry("k", "t", 1, EVENT)); // usable after
    assert_eq!(drain(&mut q, EVENT, 2), [kt("k", "t", 1)]);
}

#[test]
fn pop_due_gives_only_timers_before_its_limit() {
    let mut q = Queue::default();
    q.set(entry("a", "t", 5, EVENT));
    q.set(entry("b", "t", 5, EVENT));
    q.set(entry("c", "t", 6, EVENT));
    assert!(q.pop_due(EVENT, 5).is_none(), "5 is not before 5");
    assert!(q.pop_due(EVENT, i64::MIN).is_none());
    assert_eq!(q.len(), 3);
    assert_eq!(drain(&mut q, EVENT, 6), [kt("a", "t", 5), kt("b", "t", 5)]);
    assert_eq!(q.oldest(EVENT), Some(6));
    // a timer set while its bucket is being drained joins it in order
    q.set(entry("d", "t", 6, EVENT));
    q.set(entry("b", "t", 6, EVENT));
    assert_eq!(q.pop_due(EVENT, 7).map(|e| e.key), Some("b".into()));
    q.set(entry("a", "t", 6, EVENT));
    assert_eq!(
        drain(&mut q, EVENT, 7),
        [kt("a", "t", 6), kt("c", "t", 6), kt("d", "t", 6)]
    );
    q.set(entry("z", "t", i64::MAX, EVENT));
    assert!(
        q.pop_due(EVENT, i64::MAX).is_none(),
        "never before the largest limit"
    );
    assert_eq!(q.oldest(EVENT), Some(i64::MAX));
}

#[test]
fn domains_are_apart() {
    let mut q = Queue::default();
    q.set(entry("k", "e", 30, EVENT));
    q.set(entry("k", "w", 10, WALL));
    q.set(entry("k", "h", 20, HOLD));
    q.set(entry("j", "w", 40, WALL));
    assert_eq!(
        (q.oldest(EVENT), q.oldest(WALL), q.oldest(HOLD)),
        (Some(30), Some(10), Some(20))
    );
    assert_eq!(drain(&mut q, EVENT, 100), [kt("k", "e", 30)]);
    assert_eq!(drain(&mut q, HOLD, 15), []);
    assert_eq!(q.len(), 3);
    assert_eq!(drain(&mut q, WALL, 100), [kt("k", "w", 10), kt("j", "w", 40)]);
    assert_eq!(drain(&mut q, HOLD, 100), [kt("k", "h", 20)]);
    assert!(q.is_empty());
}

/// A few thousand operations drawn at random, against a plain model of the
/// reference: a map of the live timers, the next due the least (timestamp, key, tag).
#[test]
fn as_the_model_over_random_operations() {
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut draw = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let keys = ["a", "b", "c", "ß"];
    let tags = ["t", "u"];
    let mut q = Queue::default();
    let mut model: BTreeMap<(String, String), (i64, u8)> = BTreeMap::new();
    for step in 0..20_000 {
        let domain = draw(3) as u8;
        match draw(10) {
            0..=4 => {
                let (key, tag) = (keys[draw(4) as usize], tags[draw(2) as usize]);
                let ts = draw(12) as i64 - 2;
                q.set(entry(key, tag, ts, domain));
                model.insert((key.into(), tag.into()), (ts, domain));
            }
            5 => {
                let (key, tag) = (keys[draw(4) as usize], tags[draw(2) as usize]);
                let got = q.clear(key, tag).map(|e| (e.timestamp, e.domain));
                assert_eq!(
                    got,
                    model.remove(&(key.to_string(), tag.to_string())),
                    "step {step}"
                );
            }
            6..=8 => {
                let limit = draw(14) as i64 - 3;
                let want = model
                    .iter()
                    .filter(|(_, &(ts, d))| d == domain && ts < limit)
                    .map(|((k, t), &(ts, _))| (ts, k.clone(), t.clone()))
                    .min();
                let got = q.pop_due(domain, limit).map(|e| (e.timestamp, e.key, e.tag));
                if let Some((_, k, t)) = &want {
                    model.remove(&(k.clone(), t.clone()));
                }
                assert_eq!(got, want, "step {step}");
            }
            _ if draw(50) == 0 => {
                q.clear_all();
                model.clear();
            }
            _ => {
                let want = model
                    .values()
                    .filter(|(_, d)| *d == domain)
                    .map(|(ts, _)| *ts)
                    .min();
                assert_eq!(q.oldest(domain), want, "step {step}");
            }
        }
        assert_eq!(q.len(), model.len(), "step {step}");
    }
}
