//! The encoder (`encode.rs`): varints and values byte for byte as fastavro (and the
//! reference) writes them, read back by the decoder, and what it leaves to the
//! reference (`Refer`: the fallback is called with the value, and what it gives is the
//! encoder's answer).

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::{long, Encoder};
use crate::serde::avro::Decoder;
use crate::serde::testing::{eval, framed, hex, with_python, CODEC_CASES, LONGS};

const FP: u64 = 0x0123_4567_89AB_CDEF;

fn encoder(py: Python<'_>, plan: &str) -> Encoder {
    let fallback = eval(py, "lambda value: ('fallback', value)").unbind();
    Encoder::new(py, &eval(py, plan), framed(FP, &[]), fallback).unwrap()
}

/// `value` encoded with `plan`: the bytes, or a panic if the reference was asked.
fn encoded(py: Python<'_>, plan: &str, value: &Bound<'_, PyAny>) -> Vec<u8> {
    let got = encoder(py, plan).encode(py, value).unwrap();
    match got.downcast::<PyBytes>() {
        Ok(b) => b.as_bytes().to_vec(),
        Err(_) => panic!("{plan}: {value} went to the reference: {got}"),
    }
}

/// `data` decoded with `plan` by the decoder, as Python calls it.
fn decoded<'py>(py: Python<'py>, plan: &str, data: &[u8]) -> Bound<'py, PyAny> {
    let fallback = eval(py, "lambda data: ('fallback', data)");
    let d = py
        .get_type::<Decoder>()
        .call1((eval(py, plan), framed(FP, &[]), 1000, fallback))
        .unwrap();
    d.call_method1("decode", (PyBytes::new(py, data),)).unwrap()
}

#[test]
fn longs_as_the_specification_writes_them() {
    for (v, bytes) in LONGS {
        let mut out = Vec::new();
        long(&mut out, v);
        assert_eq!(out, hex(bytes), "{v}");
    }
}

#[test]
fn values_as_fastavro_writes_them_and_back() {
    with_python(|py| {
        for (plan, value, body) in CODEC_CASES {
            let v = eval(py, value);
            let data = encoded(py, plan, &v);
            assert_eq!(data, framed(FP, &hex(body)), "{plan}: {value}");
            let back = decoded(py, plan, &data);
            assert!(back.eq(&v).unwrap(), "{plan}: {back} for {value}");
        }
    });
}

#[test]
fn ints_and_longs_at_the_edges_and_back() {
    with_python(|py| {
        for (v, bytes) in LONGS {
            let value = v.into_pyobject(py).unwrap().into_any();
            let data = encoded(py, "('long',)", &value);
            assert_eq!(data, framed(FP, &hex(bytes)));
            assert!(decoded(py, "('long',)", &data).eq(v).unwrap(), "{v}");
            if i32::try_from(v).is_ok() {
                assert_eq!(encoded(py, "('int',)", &value), data, "{v} as an int");
            }
        }
    });
}

#[test]
fn floats_as_struct_packs_them() {
    // `struct.pack('<f', x)`, run once (what the reference writes)
    with_python(|py| {
        for (x, bytes) in [
            ("float('inf')", "00 00 80 7f"),
            ("float('-inf')", "00 00 80 ff"),
            ("float('nan')", "00 00 c0 7f"),
            ("1e-50", "00 00 00 00"),
            ("-0.0", "00 00 00 80"),
            ("3.4028234663852886e38", "ff ff 7f 7f"),
        ] {
            assert_eq!(
                encoded(py, "('float',)", &eval(py, x)),
                framed(FP, &hex(bytes)),
                "{x}"
            );
        }
    });
}

#[test]
fn a_missing_nullable_field_is_written_as_null() {
    // fastavro and the generated codec write {'q': 'rust'} so (run once)
    with_python(|py| {
        let plan = "('record', (('q', ('string',), False), ('lang', ('union', 0, ('string',)), True)))";
        let data = encoded(py, plan, &eval(py, "{'q': 'rust'}"));
        assert_eq!(data, framed(FP, &hex("08 72 75 73 74 00")));
    });
}

#[test]
fn what_is_not_written_here_goes_to_the_reference() {
    with_python(|py| {
        let cases = [
            ("('null',)", "0", "not None"),
            ("('boolean',)", "1", "an int, not a bool"),
            ("('int',)", "True", "a bool"),
            ("('int',)", "2**31", "beyond an int"),
            ("('int',)", "-2**31 - 1", "beyond an int"),
            ("('long',)", "2**63", "beyond a long"),
            ("('long',)", "-2**63 - 1", "beyond a long"),
            ("('long',)", "1.0", "a float"),
            ("('long',)", "type('I', (int,), {})(3)", "a subclass of int"),
            ("('float',)", "1e39", "too large for a float"),
            ("('float',)", "1", "an int"),
            (
                "('double',)",
                "type('F', (float,), {})(1.0)",
                "a subclass of float",
            ),
            ("('bytes',)", "bytearray(b'x')", "not bytes"),
            ("('string',)", "'\\ud800'", "a lone surrogate"),
            ("('string',)", "b'x'", "bytes"),
            ("('enum', ('A', 'B'))", "'Z'", "no such symbol"),
            ("('enum', ('A', 'B'))", "0", "an index"),
            ("('fixed', 4)", "b'abc'", "of another size"),
            ("('array', ('long',), False)", "(1, 2)", "a tuple"),
            ("('array', ('long',), False)", "[1, 'x']", "an item"),
            ("('map', ('long',))", "{1: 2}", "a key not a str"),
            (
                "('map', ('long',))",
                "__import__('collections').OrderedDict(a=1)",
                "a subclass of dict",
            ),
            (
                "('record', (('a', ('long',), False),))",
                "{}",
                "a field missing (a default, or an error)",
            ),
            (
                "('record', (('a', ('long',), False),))",
                "{'a': None}",
                "a field's value",
            ),
            ("('union', 0, ('long',))", "'x'", "neither branch"),
        ];
        for (plan, value, why) in cases {
            let v = eval(py, value);
            let got = encoder(py, plan).encode(py, &v).unwrap();
            let referred = got.get_item(0).is_ok_and(|tag| tag.eq("fallback").unwrap())
                && got.get_item(1).unwrap().is(&v);
            assert!(referred, "{plan} {value} ({why}): {got}");
        }
    });
}

/// A plan whose record names a class (a plain dataclass, `mwcore/serde/typed.py`), and
/// a subclass of it.
const CLASSED: &str = "(lambda C: ((\"record\", ((\"a\", (\"long\",), False), (\"b\", (\"string\",), False)), C), C, \
    type(\"Sub\", (C,), {})))(__import__(\"dataclasses\").make_dataclass(\"P\", [(\"a\", int), (\"b\", str)]))";

#[test]
fn a_record_that_names_its_class_is_made_and_written_as_one() {
    with_python(|py| {
        let made = eval(py, CLASSED);
        let (plan, class, sub) = (
            made.get_item(0).unwrap(),
            made.get_item(1).unwrap(),
            made.get_item(2).unwrap(),
        );
        let fallback = eval(py, "lambda value: ('fallback', value)").unbind();
        let enc = Encoder::new(py, &plan, framed(FP, &[]), fallback).unwrap();
        let dec = py
            .get_type::<Decoder>()
            .call1((
                &plan,
                framed(FP, &[]),
                1000,
                eval(py, "lambda data: ('fallback', data)"),
            ))
            .unwrap();
        let data = framed(FP, &hex("02 02 78"));
        let got = dec.call_method1("decode", (PyBytes::new(py, &data),)).unwrap();
        assert!(got.get_type().is(&class), "{got}: an instance of the class");
        assert!(got.eq(class.call1((1, "x")).unwrap()).unwrap(), "{got}");
        let written = enc.encode(py, &got).unwrap();
        assert_eq!(written.downcast::<PyBytes>().unwrap().as_bytes(), &data[..]);
        let d = eval(py, "{'a': 1, 'b': 'x'}");
        let written = enc.encode(py, &d).unwrap();
        assert_eq!(
            written.downcast::<PyBytes>().unwrap().as_bytes(),
            &data[..],
            "a dict too"
        );
        let other = sub.call1((1, "x")).unwrap();
        let referred = enc.encode(py, &other).unwrap();
        assert!(
            referred.get_item(0).unwrap().eq("fallback").unwrap(),
            "a subclass: the reference's"
        );
    });
}
