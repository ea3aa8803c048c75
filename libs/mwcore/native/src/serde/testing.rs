//! What the crate's unit tests share (here, in the lowest layer, so that every layer's
//! tests may use it): hex test vectors, and an embedded interpreter for the parts that
//! make Python objects (the test binary links the shared libpython: `make test`).

use std::ffi::CString;

use pyo3::prelude::*;

/// `s` (hex digits, spaces between them allowed) as bytes.
pub fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd hex: {s:?}");
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

/// `f` under the GIL of the embedded interpreter (started by the first caller).
pub fn with_python<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> R {
    pyo3::prepare_freethreaded_python();
    Python::with_gil(f)
}

/// The value of a Python expression.
pub fn eval<'py>(py: Python<'py>, expr: &str) -> Bound<'py, PyAny> {
    let code = CString::new(expr).unwrap();
    py.eval(&code, None, None)
        .unwrap_or_else(|e| panic!("{expr}: {e}"))
}

/// Zig-zag varints (an Avro `long`): the specification's examples ("Binary Encoding":
/// 0, -1, 1, -2, 2, -64, 64), the rest written by the reference once
/// (`mwcore.serde.wire._write_long`).
pub const LONGS: [(i64, &str); 20] = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (2, "04"),
    (-64, "7f"),
    (63, "7e"),
    (64, "80 01"),
    (-65, "81 01"),
    (8191, "fe 7f"),
    (-8192, "ff 7f"),
    (8192, "80 80 01"),
    (i32::MAX as i64, "fe ff ff ff 0f"),
    (i32::MIN as i64, "ff ff ff ff 0f"),
    ((1 << 62) - 1, "fe ff ff ff ff ff ff ff 7f"),
    (1 << 62, "80 80 80 80 80 80 80 80 80 01"),
    (-(1 << 62), "ff ff ff ff ff ff ff ff 7f"),
    (-(1 << 62) - 1, "81 80 80 80 80 80 80 80 80 01"),
    (i64::MAX, "fe ff ff ff ff ff ff ff ff 01"),
    (i64::MIN, "ff ff ff ff ff ff ff ff ff 01"),
];

/// (plan, value, its Avro body): each plan is `mwcore.serde.native_plan.native_plan` of a
/// schema, each body fastavro 1.13.1's `schemaless_writer` of the value (the generated
/// codec of `mwcore.serde.codegen` writes the same bytes), run once.
pub const CODEC_CASES: [(&str, &str, &str); 14] = [
    (
        "('record', (('n', ('null',), False), ('b', ('boolean',), False), ('i', ('int',), False), \
         ('l', ('long',), False), ('f', ('float',), False), ('d', ('double',), False), \
         ('by', ('bytes',), False), ('s', ('string',), False)))",
        "{'n': None, 'b': True, 'i': -3, 'l': 1099511627776, 'f': 1.5, 'd': -0.25, \
         'by': b'\\x00\\xff', 's': 'h\\u00e9llo'}",
        "01 05 80 80 80 80 80 40 00 00 c0 3f 00 00 00 00 00 00 d0 bf 04 00 ff 0c 68 c3 a9 6c 6c 6f",
    ),
    ("('array', ('long',), False)", "[1, -1, 64]", "06 02 01 80 01 00"),
    ("('array', ('long',), False)", "[]", "00"),
    (
        "('map', ('int',))",
        "{'a': 1, 'b': -2}",
        "04 02 61 02 02 62 03 00",
    ),
    ("('map', ('int',))", "{}", "00"),
    ("('union', 0, ('string',))", "None", "00"),
    ("('union', 0, ('string',))", "'x'", "02 02 78"),
    ("('union', 1, ('string',))", "None", "02"),
    ("('union', 1, ('string',))", "'x'", "00 02 78"),
    ("('enum', ('A', 'B', 'C'))", "'C'", "04"),
    ("('enum', ('A', 'B', 'C'))", "'A'", "00"),
    ("('fixed', 4)", "b'\\x01\\x02\\x03\\x04'", "01 02 03 04"),
    ("('array', ('null',), True)", "[None, None, None]", "06 00"),
    (
        "('record', (('q', ('string',), False), ('lang', ('union', 0, ('string',)), True), \
         ('tags', ('array', ('string',), False), False), ('m', ('map', ('array', ('int',), False)), False)))",
        "{'q': 'rust', 'lang': None, 'tags': ['a', 'bc'], 'm': {'k': [1, 2]}}",
        "08 72 75 73 74 00 04 02 61 04 62 63 00 02 02 6b 04 02 04 00 00",
    ),
];

/// A single-object header (the marker, then the fingerprint, little-endian) and `body`.
pub fn framed(fingerprint: u64, body: &[u8]) -> Vec<u8> {
    [&[0xC3, 0x01][..], &fingerprint.to_le_bytes(), body].concat()
}
