//! A strict JSON scanner for one JSON-RPC message: one pass over the bytes, no tree, and no
//! allocation unless a key or a routing member holds an escape (or an object has many keys).
//!
//! It accepts what serde_json accepts and refuses a duplicate key at any depth, comparing keys after
//! unescaping: the contract, what it mirrors and the tests that hold it to serde_json are in the
//! docs of the parent module. On the way it picks up the routing members: `jsonrpc`, `id` (raw), `method`
//! and `params.name`, and where the members of `params` an intercepted call needs lie. The serde-based walk it replaced is kept as a test oracle (`oracle.rs`), and
//! the two are checked against each other on generated and mutated messages.

use std::borrow::Cow;
use std::collections::HashSet;

use super::{Envelope, Params, Scalar};

/// Why a body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ScanError {
    /// Not JSON (or too deep, or a number out of range): a parse error.
    Syntax,
    /// JSON, but an object repeats a key: an invalid request.
    DuplicateKey,
}

/// serde_json's recursion limit: the 128th nested container is refused.
pub(super) const MAX_DEPTH: usize = 127;
/// Keys of one object compared one by one; a larger object gets a hash set.
const FEW_KEYS: usize = 16;

/// Reads one top-level object; `text` must start (after whitespace) with `{`.
pub(super) fn envelope(text: &str) -> Result<Envelope<'_>, ScanError> {
    let mut scanner = Scanner::new(text);
    if scanner.peek() != Some(b'{') {
        return Err(ScanError::Syntax);
    }
    let mut envelope = Envelope::default();
    scanner.object(|s, key| {
        match key {
            Key::Jsonrpc => envelope.jsonrpc = Some(s.scalar()?),
            Key::Method => envelope.method = Some(s.scalar()?),
            Key::Id => {
                let start = s.pos;
                s.value()?;
                envelope.id = Some(&s.text[start..s.pos]);
            }
            Key::Params => envelope.params = Some(s.params()?),
            _ => s.value()?,
        }
        Ok(())
    })?;
    scanner.end()?;
    Ok(envelope)
}

/// Whether `text` is exactly one JSON value (of any kind), with nothing but whitespace around it.
pub(super) fn is_json(text: &str) -> bool {
    let mut scanner = Scanner::new(text);
    scanner.value().and_then(|()| scanner.end()).is_ok()
}

/// The keys the routing members and the members of `params` the decision reads sit under
/// (compared after unescaping).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Jsonrpc,
    Id,
    Method,
    Params,
    Name,
    Meta,
    Arguments,
    RequestState,
    InputResponses,
    Other,
}

impl Key {
    fn of(key: &str) -> Self {
        match key {
            "jsonrpc" => Key::Jsonrpc,
            "id" => Key::Id,
            "method" => Key::Method,
            "params" => Key::Params,
            "name" => Key::Name,
            "_meta" => Key::Meta,
            "arguments" => Key::Arguments,
            "requestState" => Key::RequestState,
            "inputResponses" => Key::InputResponses,
            _ => Key::Other,
        }
    }
}

struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
    /// The keys of the objects being read, innermost last; each object truncates back on exit.
    keys: Vec<Cow<'a, str>>,
}

impl<'a> Scanner<'a> {
    /// A scanner at the first non-whitespace byte of `text`.
    fn new(text: &'a str) -> Self {
        let mut scanner = Scanner {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            depth: 0,
            keys: Vec::with_capacity(FEW_KEYS),
        };
        scanner.whitespace();
        scanner
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Result<(), ScanError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(ScanError::Syntax)
        }
    }

    /// Only whitespace may follow the message.
    fn end(&mut self) -> Result<(), ScanError> {
        self.whitespace();
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(ScanError::Syntax)
        }
    }

    /// Any value, checked in full.
    fn value(&mut self) -> Result<(), ScanError> {
        match self.peek() {
            Some(b'{') => self.object(|s, _| s.value()),
            Some(b'[') => self.array(),
            Some(b'"') => self.string().map(drop),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(ScanError::Syntax),
        }
    }

    /// A member that should be a string: its text, or `Other` after checking whatever it is.
    fn scalar(&mut self) -> Result<Scalar<'a>, ScanError> {
        if self.peek() == Some(b'"') {
            return self.string().map(Scalar::Str);
        }
        self.value().map(|()| Scalar::Other)
    }

    /// `params`: an object with `name` picked up and where the members the decision reads
    /// lie, or any other value.
    fn params(&mut self) -> Result<Params<'a>, ScanError> {
        if self.peek() != Some(b'{') {
            self.value()?;
            return Ok(Params::new(false, None));
        }
        let mut params = Params::new(true, None);
        self.object(|s, key| {
            let start = s.pos;
            let slot = match key {
                Key::Name => {
                    params.name = Some(s.scalar()?);
                    return Ok(());
                }
                Key::Meta => &mut params.members.meta,
                Key::Arguments => &mut params.members.arguments,
                Key::RequestState => &mut params.members.request_state,
                Key::InputResponses => &mut params.members.input_responses,
                _ => return s.value(),
            };
            s.value()?;
            *slot = Some(start..s.pos);
            Ok(())
        })?;
        Ok(params)
    }

    /// Steps into a container; `false` if it is empty (and already left).
    fn enter(&mut self, close: u8) -> Result<bool, ScanError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(ScanError::Syntax);
        }
        self.pos += 1;
        self.whitespace();
        if self.peek() == Some(close) {
            self.pos += 1;
            self.depth -= 1;
            return Ok(false);
        }
        Ok(true)
    }

    /// After a member or an element: `true` past a comma (another follows), `false` past `close`
    /// (the container is left).
    fn more(&mut self, close: u8) -> Result<bool, ScanError> {
        self.whitespace();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                self.whitespace();
                Ok(true)
            }
            Some(b) if b == close => {
                self.pos += 1;
                self.depth -= 1;
                Ok(false)
            }
            _ => Err(ScanError::Syntax),
        }
    }

    /// An object; `member` reads each value (positioned at it) given what its key names.
    fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, Key) -> Result<(), ScanError>,
    ) -> Result<(), ScanError> {
        if !self.enter(b'}')? {
            return Ok(());
        }
        let first_key = self.keys.len();
        let mut many: Option<HashSet<Cow<'a, str>>> = None;
        loop {
            if self.peek() != Some(b'"') {
                return Err(ScanError::Syntax);
            }
            let key = self.string()?;
            self.whitespace();
            self.expect(b':')?;
            self.whitespace();
            let named = Key::of(&key);
            let fresh = match &mut many {
                Some(set) => set.insert(key),
                None if self.keys[first_key..].contains(&key) => false,
                None if self.keys.len() - first_key < FEW_KEYS => {
                    self.keys.push(key);
                    true
                }
                None => {
                    let mut set: HashSet<_> = self.keys.drain(first_key..).collect();
                    set.insert(key);
                    many = Some(set);
                    true
                }
            };
            if !fresh {
                return Err(ScanError::DuplicateKey);
            }
            member(self, named)?;
            if !self.more(b'}')? {
                break;
            }
        }
        self.keys.truncate(first_key);
        Ok(())
    }

    fn array(&mut self) -> Result<(), ScanError> {
        if self.enter(b']')? {
            loop {
                self.value()?;
                if !self.more(b']')? {
                    break;
                }
            }
        }
        Ok(())
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), ScanError> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(ScanError::Syntax)
        }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`, and finite as an `f64`.
    fn number(&mut self) -> Result<(), ScanError> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(ScanError::Syntax);
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(ScanError::Syntax),
        }
        let mut plain = self.pos - start <= 19;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.digits1()?;
            plain = false;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            self.digits1()?;
            plain = false;
        }
        // serde_json refuses a number whose value overflows an f64, as *it* computes the value
        // (which depends on its `float_roundtrip` feature, on here but unified with whatever the
        // application turns on), so ask it rather than `str::parse`.
        if !plain && serde_json::from_str::<f64>(&self.text[start..self.pos]).is_err() {
            return Err(ScanError::Syntax);
        }
        Ok(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    fn digits1(&mut self) -> Result<(), ScanError> {
        let start = self.pos;
        self.digits();
        if self.pos == start {
            Err(ScanError::Syntax)
        } else {
            Ok(())
        }
    }

    /// A string, positioned at its opening quote; borrowed unless it holds an escape.
    fn string(&mut self) -> Result<Cow<'a, str>, ScanError> {
        self.pos += 1;
        let start = self.pos;
        self.skip_plain();
        loop {
            match self.peek() {
                Some(b'"') => {
                    let text = &self.text[start..self.pos];
                    self.pos += 1;
                    return Ok(Cow::Borrowed(text));
                }
                Some(b'\\') => break,
                Some(0x00..=0x1f) | None => return Err(ScanError::Syntax),
                Some(_) => self.pos += 1,
            }
        }
        let mut out = String::from(&self.text[start..self.pos]);
        loop {
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let escaped = self.peek().ok_or(ScanError::Syntax)?;
                    self.pos += 1;
                    let c = match escaped {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return Err(ScanError::Syntax),
                    };
                    out.push(c);
                }
                Some(0x00..=0x1f) | None => return Err(ScanError::Syntax),
                Some(_) => {
                    // Copy up to the next quote, backslash or control character at once.
                    let run_start = self.pos;
                    while let Some(b) = self.peek() {
                        if b == b'"' || b == b'\\' || b < 0x20 {
                            break;
                        }
                        self.pos += 1;
                    }
                    out.push_str(&self.text[run_start..self.pos]);
                }
            }
        }
    }

    /// Skips string bytes that need no attention (not `"`, not `\\`, not a control character),
    /// 32 at a time (a branch-free fold the compiler turns into vector compares), then eight at
    /// a time while it can.
    fn skip_plain(&mut self) {
        while let Some(chunk) = self.bytes.get(self.pos..self.pos + 32) {
            let special = chunk.iter().fold(false, |seen, &b| {
                seen | (b < 0x20) | (b == b'"') | (b == b'\\')
            });
            if special {
                break;
            }
            self.pos += 32;
        }
        const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
        const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
        let has_zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
        while let Some(chunk) = self.bytes.get(self.pos..self.pos + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let w = u64::from_ne_bytes(word);
            // A byte below 0x20, a quote or a backslash (bytes of 0x80 and up never match).
            let special = (w.wrapping_sub(u64::from_ne_bytes([0x20; 8])) & !w & HIGHS)
                | has_zero(w ^ u64::from_ne_bytes([b'"'; 8]))
                | has_zero(w ^ u64::from_ne_bytes([b'\\'; 8]));
            if special != 0 {
                break;
            }
            self.pos += 8;
        }
        while let Some(&b) = self.bytes.get(self.pos) {
            if b == b'"' || b == b'\\' || b < 0x20 {
                break;
            }
            self.pos += 1;
        }
    }

    /// The code point of `XXXX` after `\u` (and of a following low surrogate, if it is a high one).
    fn unicode_escape(&mut self) -> Result<char, ScanError> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if !self.bytes[self.pos..].starts_with(b"\\u") {
                    return Err(ScanError::Syntax);
                }
                self.pos += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(ScanError::Syntax);
                }
                0x10000 + ((u32::from(first) - 0xD800) << 10) + (u32::from(second) - 0xDC00)
            }
            0xDC00..=0xDFFF => return Err(ScanError::Syntax),
            other => u32::from(other),
        };
        char::from_u32(code).ok_or(ScanError::Syntax)
    }

    fn hex4(&mut self) -> Result<u16, ScanError> {
        let digits = self
            .bytes
            .get(self.pos..self.pos + 4)
            .ok_or(ScanError::Syntax)?;
        let mut value = 0u16;
        for &d in digits {
            let nibble = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' => d - b'A' + 10,
                _ => return Err(ScanError::Syntax),
            };
            value = value << 4 | u16::from(nibble);
        }
        self.pos += 4;
        Ok(value)
    }
}
