//! A Redis command in RESP, written as hiredis's `pack_command` writes it: an array
//! header with the argument count, then each argument as a bulk string (integers in
//! decimal).

pub struct Resp {
    buf: Vec<u8>,
    expected: usize,
    written: usize,
}

impl Resp {
    /// A command of `args` arguments (checked by `finish`).
    pub fn new(args: usize) -> Self {
        let mut buf = Vec::with_capacity(64 + 16 * args);
        buf.push(b'*');
        push_decimal(&mut buf, args as i64);
        buf.extend_from_slice(b"\r\n");
        Resp {
            buf,
            expected: args,
            written: 0,
        }
    }

    pub fn bulk(&mut self, data: &[u8]) {
        self.buf.push(b'$');
        push_decimal(&mut self.buf, data.len() as i64);
        self.buf.extend_from_slice(b"\r\n");
        self.buf.extend_from_slice(data);
        self.buf.extend_from_slice(b"\r\n");
        self.written += 1;
    }

    pub fn int(&mut self, value: i64) {
        self.bulk(itoa::Buffer::new().format(value).as_bytes());
    }

    pub fn finish(self) -> Vec<u8> {
        assert_eq!(
            self.written, self.expected,
            "the argument count written in the header"
        );
        self.buf
    }
}

fn push_decimal(buf: &mut Vec<u8>, value: i64) {
    buf.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}
