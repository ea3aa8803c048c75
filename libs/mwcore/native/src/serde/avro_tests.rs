//! The decoder (`avro.rs`): its varint reader at the edges, values read as fastavro
//! writes them, and what it leaves to the reference (`Refer`: the fallback is called
//! with the value's bytes, and what it gives is the decoder's answer).

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::{Decoder, Reader};
use crate::serde::encode::long;
use crate::serde::strings::Strings;
use crate::serde::testing::{eval, framed, hex, with_python, CODEC_CASES, LONGS};

const FP: u64 = 0x0123_4567_89AB_CDEF;

/// The long at the start of `b`, and the bytes it took.
fn read_long(b: &[u8]) -> Option<(i64, usize)> {
    let mut r = Reader {
        b,
        p: 0,
        max_items: 0,
        strings: None,
    };
    r.long().ok().map(|v| (v, r.p))
}

fn decoder(py: Python<'_>, plan: &str, max_items: u64) -> Decoder {
    let fallback = eval(py, "lambda data: ('fallback', data)").unbind();
    Decoder::new(py, &eval(py, plan), framed(FP, &[]), max_items, fallback, None).unwrap()
}

fn decode<'py>(py: Python<'py>, d: &Decoder, data: &[u8]) -> Bound<'py, PyAny> {
    d.decode(py, &PyBytes::new(py, data)).unwrap()
}

fn lang<'py>(v: &Bound<'py, PyAny>) -> Bound<'py, PyAny> {
    v.get_item("lang").unwrap()
}

/// Whether `v` is the fallback's answer for `data`.
fn referred(py: Python<'_>, v: &Bound<'_, PyAny>, data: &[u8]) -> bool {
    v.eq(("fallback", PyBytes::new(py, data))).unwrap()
}

#[test]
fn the_varints_are_read() {
    for (v, bytes) in LONGS {
        let b = hex(bytes);
        assert_eq!(read_long(&b), Some((v, b.len())), "{bytes}");
    }
}

#[test]
fn longs_round_trip_at_the_edges() {
    let mut values = vec![0, -1, 1, i64::MIN, i64::MAX, i64::MIN + 1, i64::MAX - 1];
    for k in 0..63 {
        let p = 1i64 << k;
        values.extend([p - 1, p, p + 1, -p, -p - 1]);
    }
    for v in values {
        let mut out = Vec::new();
        long(&mut out, v);
        let zigzag = ((v << 1) ^ (v >> 63)) as u64;
        let bits = 64 - zigzag.leading_zeros() as usize;
        assert_eq!(out.len(), bits.div_ceil(7).max(1), "{v}: 7 bits a byte");
        out.push(0x55); // what follows is not read
        assert_eq!(read_long(&out), Some((v, out.len() - 1)), "{v}");
    }
}

#[test]
fn an_over_long_varint_is_refused() {
    // more than 64 bits in the tenth byte: the reference reads a wider int
    assert_eq!(read_long(&hex("80 80 80 80 80 80 80 80 80 02")), None);
    assert_eq!(read_long(&hex("ff ff ff ff ff ff ff ff ff 03")), None);
    // an eleventh byte: the reference refuses it
    assert_eq!(read_long(&hex("80 80 80 80 80 80 80 80 80 80 00")), None);
    assert_eq!(read_long(&hex("ff ff ff ff ff ff ff ff ff ff 01")), None);
    // ended early
    assert_eq!(read_long(&[]), None);
    assert_eq!(read_long(&hex("80")), None);
    assert_eq!(read_long(&hex("ff ff ff")), None);
    // at the edge, and not the shortest form: read as the reference reads them
    assert_eq!(
        read_long(&hex("80 80 80 80 80 80 80 80 80 01")),
        Some((1 << 62, 10))
    );
    assert_eq!(read_long(&hex("80 80 80 80 80 80 80 80 80 00")), Some((0, 10)));
    assert_eq!(read_long(&hex("81 00")), Some((-1, 2)));
}

#[test]
fn values_are_read_as_fastavro_writes_them() {
    with_python(|py| {
        for (plan, value, body) in CODEC_CASES {
            let d = decoder(py, plan, 1000);
            let data = framed(FP, &hex(body));
            let got = decode(py, &d, &data);
            assert!(!referred(py, &got, &data), "{plan}: decoded here");
            assert!(got.eq(eval(py, value)).unwrap(), "{plan}: {got} for {value}");
        }
    });
}

#[test]
fn a_negative_block_count_is_followed_by_its_size() {
    with_python(|py| {
        // fastavro reads `01 06 02 61 02 00` as {'a': 1}: a block of -1 items of 6 bytes
        let d = decoder(py, "('map', ('int',))", 1000);
        let got = decode(py, &d, &framed(FP, &hex("01 06 02 61 02 00")));
        assert!(got.eq(eval(py, "{'a': 1}")).unwrap(), "{got}");
        let d = decoder(py, "('array', ('long',), False)", 1000);
        let got = decode(py, &d, &framed(FP, &hex("03 04 02 04 00")));
        assert!(got.eq(eval(py, "[1, 2]")).unwrap(), "{got}");
    });
}

#[test]
fn a_counted_arrays_negative_block_is_read_as_the_reference_reads_it() {
    // The reference (`codegen._Gen.read_blocks`) does not skip the size of a negative
    // block of items that take no bytes: for `05 00 00 54` (3 nulls in a block of 0
    // bytes, the end, b = 42) it gives {'a': [None, None, None], 'b': 0} (run once;
    // fastavro gives b = 42). The decoder holds to the reference.
    with_python(|py| {
        let plan = "('record', (('a', ('array', ('null',), True), False), ('b', ('long',), False)))";
        let d = decoder(py, plan, 1000);
        let got = decode(py, &d, &framed(FP, &hex("05 00 00 54")));
        assert!(
            got.eq(eval(py, "{'a': [None, None, None], 'b': 0}")).unwrap(),
            "{got}"
        );
    });
}

#[test]
fn another_writer_or_no_header_goes_to_the_reference() {
    with_python(|py| {
        let d = decoder(py, "('long',)", 1000);
        let mut other_magic = framed(FP, &hex("02"));
        other_magic[1] = 0x02;
        for data in [
            framed(FP + 1, &hex("02")), // another writer's fingerprint
            other_magic,
            framed(FP, &[])[..9].to_vec(), // shorter than a header
            Vec::new(),
        ] {
            let got = decode(py, &d, &data);
            assert!(referred(py, &got, &data), "{data:?}: {got}");
        }
        let ok = decode(py, &d, &framed(FP, &hex("02")));
        assert!(ok.eq(1).unwrap());
    });
}

#[test]
fn what_does_not_decode_here_goes_to_the_reference() {
    with_python(|py| {
        let cases = [
            (
                "('long',)",
                "80 80 80 80 80 80 80 80 80 02",
                "a varint beyond 64 bits",
            ),
            ("('long',)", "80 80 80 80 80 80 80 80 80 80 00", "eleven bytes"),
            ("('long',)", "", "ended early"),
            ("('boolean',)", "", "ended early"),
            ("('float',)", "00 00 c0", "ended early"),
            ("('double',)", "00 00 00 00 00 00 d0", "ended early"),
            ("('string',)", "06 61 62", "shorter than its length"),
            ("('string',)", "01", "a negative length"),
            ("('string',)", "04 ff fe", "not UTF-8"),
            ("('bytes',)", "0a 00", "shorter than its length"),
            ("('fixed', 4)", "01 02 03", "ended early"),
            ("('enum', ('A', 'B'))", "04", "no symbol 2"),
            ("('enum', ('A', 'B'))", "01", "a negative index"),
            ("('union', 0, ('long',))", "04 02", "no branch 2"),
            ("('union', 0, ('long',))", "01", "no branch -1"),
            ("('array', ('long',), False)", "04 02", "an item missing"),
            ("('array', ('null',), True)", "0a 00", "5 items over 4"),
            ("('array', ('null',), True)", "04 06 00", "2 + 3 items over 4"),
            ("('map', ('long',))", "02 02 61", "a value missing"),
            (
                "('record', (('a', ('long',), False), ('b', ('string',), False)))",
                "02",
                "a field missing",
            ),
        ];
        for (plan, body, why) in cases {
            let d = decoder(py, plan, 4);
            let data = framed(FP, &hex(body));
            let got = decode(py, &d, &data);
            assert!(referred(py, &got, &data), "{plan} {body} ({why}): {got}");
        }
        // at the bound: decoded here
        let d = decoder(py, "('array', ('null',), True)", 4);
        let got = decode(py, &d, &framed(FP, &hex("04 04 00")));
        assert!(got.eq(eval(py, "[None] * 4")).unwrap(), "{got}");
    });
}

#[test]
fn decode_slice_keeps_recurring_strings() {
    with_python(|py| {
        let plan = "('record', (('lang', ('string',), False), ('q', ('string',), False)))";
        let d = decoder(py, plan, 1000);
        let data = framed(FP, &hex("0a 65 6e 2d 47 42 06 66 6f 6f")); // en-GB, foo
        let mut strings = Strings::new();
        let a = d.decode_slice(py, &data, Some(&mut strings)).unwrap();
        let b = d.decode_slice(py, &data, Some(&mut strings)).unwrap();
        assert!(a.eq(eval(py, "{'lang': 'en-GB', 'q': 'foo'}")).unwrap());
        assert!(lang(&a).is(lang(&b)), "one str from the table");
        let c = d.decode_slice(py, &data, None).unwrap();
        assert!(
            !lang(&c).is(lang(&a)) && c.eq(&a).unwrap(),
            "without a table: made anew"
        );
        let short = framed(FP, &hex("0a 65 6e"));
        let got = d.decode_slice(py, &short, Some(&mut strings)).unwrap();
        assert!(
            referred(py, &got, &short),
            "a bytes object made for the reference"
        );
    });
}
