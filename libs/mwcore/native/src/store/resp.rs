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

#[cfg(test)]
mod tests {
    use super::*;

    // Each expected command: hiredis 3.5.0's `pack_command` of the same arguments, run once
    // (`python -c 'import hiredis; print(hiredis.pack_command((b"SET", b"k", -42, b"")))'`).

    #[test]
    fn bulk_strings_and_integers_as_hiredis_packs_them() {
        let mut r = Resp::new(4);
        r.bulk(b"SET");
        r.bulk(b"k");
        r.int(-42);
        r.bulk(b"");
        assert_eq!(
            r.finish(),
            b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\n-42\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn binary_arguments_and_the_extreme_integers() {
        let mut r = Resp::new(6);
        r.bulk(b"EVALSHA");
        r.bulk(b"ab");
        r.int(2);
        r.bulk(b"x\r\ny"); // sized, so CR LF inside an argument is only data
        r.int(i64::MAX);
        r.int(i64::MIN);
        let want: &[u8] = b"*6\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n2\r\n$4\r\nx\r\ny\r\n\
            $19\r\n9223372036854775807\r\n$20\r\n-9223372036854775808\r\n";
        assert_eq!(r.finish(), want);

        let mut r = Resp::new(2);
        r.bulk(&[0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF]);
        r.int(0);
        assert_eq!(r.finish(), b"*2\r\n$6\r\n\xfa\xfb\xfc\xfd\xfe\xff\r\n$1\r\n0\r\n");
    }

    #[test]
    fn a_long_argument_and_many_arguments() {
        let big = vec![b'v'; 1000];
        let mut r = Resp::new(12);
        r.bulk(&big);
        for i in 0..11 {
            r.int(i);
        }
        let mut want = b"*12\r\n$1000\r\n".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"\r\n");
        for i in 0..11 {
            let digits = i.to_string();
            want.extend_from_slice(format!("${}\r\n{digits}\r\n", digits.len()).as_bytes());
        }
        assert_eq!(r.finish(), want);
        assert_eq!(Resp::new(0).finish(), b"*0\r\n");
    }

    #[test]
    #[should_panic(expected = "the argument count written in the header")]
    fn finish_refuses_too_few_arguments() {
        let mut r = Resp::new(3);
        r.bulk(b"GET");
        r.bulk(b"k");
        r.finish();
    }

    #[test]
    #[should_panic(expected = "the argument count written in the header")]
    fn finish_refuses_too_many_arguments() {
        let mut r = Resp::new(1);
        r.bulk(b"PING");
        r.int(1);
        r.finish();
    }
}
