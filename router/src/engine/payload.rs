//! The body as rules see it (`.payload`), read in one pass.
//!
//! The same grammar as `jaq_json::read::parse_single` (jaq's own reader, which decided every
//! stored decision so far), with two differences that change cost, never the value:
//! - **depth is counted while reading**, so a body nested deeper than [`MAX_BODY_DEPTH`] stops
//!   the read at that depth instead of needing a scan of its own first (jaq's reader recurses
//!   without a limit and aborts the process on deep input);
//! - **strings without escapes are slices of the body**, not copies: the stored body is one
//!   reference-counted buffer, and most of a forge payload's bytes are plain strings;
//! - **arrays and objects are allocated once, at their size**: their members gather on one
//!   scratch stack per read and move into a collection of the right capacity when it closes,
//!   instead of growing (and an object rehashing) member by member.

use bytes::Bytes;
use hifijson::token::{Expect, Lex};
use hifijson::{Read, SliceLexer};
use jaq_json::{Map, Num, Val};

use switchboard_model::body::MAX_BODY_DEPTH;

use super::projection::Projection;

/// Why a body is not read as JSON (it then reaches rules as text).
#[derive(Debug)]
enum NotJson {
    Syntax,
    TooDeep,
}

impl From<hifijson::Error> for NotJson {
    fn from(_: hifijson::Error) -> Self {
        NotJson::Syntax
    }
}

impl From<Expect> for NotJson {
    fn from(_: Expect) -> Self {
        NotJson::Syntax
    }
}

impl From<hifijson::str::Error> for NotJson {
    fn from(_: hifijson::str::Error) -> Self {
        NotJson::Syntax
    }
}

/// The body's JSON value, or its text (lossily decoded) when it is not JSON or nests deeper
/// than [`MAX_BODY_DEPTH`].
pub fn parse_payload(body: &Bytes) -> Val {
    parse_payload_reading(body, &Projection::Whole)
}

/// [`parse_payload`], building only what `reads` reaches ([`Projection`]): every other part
/// of the body is checked as it passes (the same grammar, the same depth bound) but never
/// built, so the value is a text exactly when the whole read's is, and every part a rule can
/// reach is the same.
pub fn parse_payload_reading(body: &Bytes, reads: &Projection) -> Val {
    match read_json(body, reads) {
        Ok(v) => v,
        Err(_) => Val::from(String::from_utf8_lossy(body).into_owned()),
    }
}

/// Exactly one JSON value (whitespace and `#` comments around it), as jaq reads it.
fn read_json(body: &Bytes, reads: &Projection) -> Result<Val, NotJson> {
    let mut lexer = SliceLexer::new(body);
    let mut reader = Reader {
        body,
        items: Vec::new(),
        members: Vec::new(),
    };
    lexer.exactly_one(ws_tk, |next, lexer| reader.read(next, lexer, 0, reads))
}

/// Eat whitespace and comments, then peek at the next character (jaq's `ws_tk`).
fn ws_tk<L: Lex>(lexer: &mut L) -> Option<u8> {
    loop {
        lexer.eat_whitespace();
        match lexer.peek_next() {
            Some(b'#') => lexer.skip_until(|c| c == b'\n'),
            next => return next,
        }
    }
}

/// A string being read: a slice of the body until its first escape, then an owned copy.
enum Text<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl Text<'_> {
    fn owned(&mut self) -> &mut Vec<u8> {
        if let Text::Borrowed(b) = self {
            *self = Text::Owned(b.to_vec());
        }
        match self {
            Text::Owned(v) => v,
            Text::Borrowed(_) => unreachable!("made owned above"),
        }
    }
}

struct Reader<'b> {
    body: &'b Bytes,
    /// Members of the arrays being read, innermost last.
    items: Vec<Val>,
    /// Key and value pairs of the objects being read, innermost last.
    members: Vec<(Val, Val)>,
}

impl<'b> Reader<'b> {
    fn value(
        &mut self,
        next: u8,
        lexer: &mut SliceLexer<'b>,
        depth: usize,
    ) -> Result<Val, NotJson> {
        Ok(match next {
            b'n' if lexer.strip_prefix(b"null") => Val::Null,
            b't' if lexer.strip_prefix(b"true") => Val::Bool(true),
            b'f' if lexer.strip_prefix(b"false") => Val::Bool(false),
            b'b' if lexer.strip_prefix(b"b\"") => Val::byte_str(self.string(lexer, true)?),
            b'N' if lexer.strip_prefix(b"NaN") => Val::Num(Num::Float(f64::NAN)),
            b'I' if lexer.strip_prefix(b"Infinity") => Val::Num(Num::Float(f64::INFINITY)),
            b'0'..=b'9' | b'+' | b'-' => Val::Num(number(lexer)?),
            b'"' => Val::utf8_str(self.string(lexer.discarded(), false)?),
            b'[' | b'{' if depth >= MAX_BODY_DEPTH => return Err(NotJson::TooDeep),
            b'[' => {
                let start = self.items.len();
                lexer.discarded().seq(b']', ws_tk, |next, lexer| {
                    let item = self.value(next, lexer, depth + 1)?;
                    self.items.push(item);
                    Ok::<_, NotJson>(())
                })?;
                self.array_from(start)
            }
            b'{' => {
                let start = self.members.len();
                lexer.discarded().seq(b'}', ws_tk, |next, lexer| {
                    let key = self.value(next, lexer, depth + 1)?;
                    lexer.expect(ws_tk, b':').ok_or(Expect::Colon)?;
                    let value = self.value(ws_tk(lexer).ok_or(Expect::Value)?, lexer, depth + 1)?;
                    self.members.push((key, value));
                    Ok::<_, NotJson>(())
                })?;
                self.object_from(start)
            }
            _ => return Err(NotJson::Syntax),
        })
    }

    /// The array of the items gathered since `start`, allocated once at its size.
    fn array_from(&mut self, start: usize) -> Val {
        let arr: Vec<Val> = self.items.drain(start..).collect();
        Val::Arr(arr.into())
    }

    /// The object of the members gathered since `start`, allocated once at its size: in
    /// order, a repeated key keeping its first place and its last value, as inserting one by
    /// one does.
    fn object_from(&mut self, start: usize) -> Val {
        let members = self.members.drain(start..);
        let mut obj = Map::with_capacity_and_hasher(members.len(), Default::default());
        obj.extend(members);
        Val::obj(obj)
    }

    /// The value starting with `next`, built as far as `reads` reaches.
    fn read(
        &mut self,
        next: u8,
        lexer: &mut SliceLexer<'b>,
        depth: usize,
        reads: &Projection,
    ) -> Result<Val, NotJson> {
        if reads.is_whole() {
            return self.value(next, lexer, depth);
        }
        Ok(match next {
            b'[' | b'{' if depth >= MAX_BODY_DEPTH => return Err(NotJson::TooDeep),
            b'[' => {
                let item = reads.item();
                let start = self.items.len();
                lexer.discarded().seq(b']', ws_tk, |next, lexer| {
                    match item {
                        Some(item) => {
                            let v = self.read(next, lexer, depth + 1, item)?;
                            self.items.push(v);
                        }
                        None => self.skip(next, lexer, depth + 1)?,
                    }
                    Ok::<_, NotJson>(())
                })?;
                self.array_from(start)
            }
            b'{' => {
                let start = self.members.len();
                lexer.discarded().seq(b'}', ws_tk, |next, lexer| {
                    let (key, wanted) = if next == b'"' {
                        let text = self.string(lexer.discarded(), false)?;
                        let wanted = reads.member(&text);
                        (Key::Text(text), wanted)
                    } else {
                        let key = self.value(next, lexer, depth + 1)?;
                        let wanted = match &key {
                            Val::TStr(b) | Val::BStr(b) => reads.member(b),
                            _ => reads.item(),
                        };
                        (Key::Value(key), wanted)
                    };
                    lexer.expect(ws_tk, b':').ok_or(Expect::Colon)?;
                    let next = ws_tk(lexer).ok_or(Expect::Value)?;
                    match wanted {
                        Some(wanted) => {
                            let value = self.read(next, lexer, depth + 1, wanted)?;
                            let key = match key {
                                Key::Text(text) => Val::utf8_str(text),
                                Key::Value(key) => key,
                            };
                            self.members.push((key, value));
                        }
                        None => self.skip(next, lexer, depth + 1)?,
                    }
                    Ok::<_, NotJson>(())
                })?;
                self.object_from(start)
            }
            _ => self.value(next, lexer, depth)?,
        })
    }

    /// Checks the value starting with `next` as [`Self::value`] reads it, building nothing:
    /// the same errors at the same depth.
    fn skip(&mut self, next: u8, lexer: &mut SliceLexer<'b>, depth: usize) -> Result<(), NotJson> {
        match next {
            b'n' if lexer.strip_prefix(b"null") => {}
            b't' if lexer.strip_prefix(b"true") => {}
            b'f' if lexer.strip_prefix(b"false") => {}
            b'b' if lexer.strip_prefix(b"b\"") => skip_string(lexer, true)?,
            b'N' if lexer.strip_prefix(b"NaN") => {}
            b'I' if lexer.strip_prefix(b"Infinity") => {}
            b'0'..=b'9' | b'+' | b'-' => skip_number(lexer)?,
            b'"' => skip_string(lexer.discarded(), false)?,
            b'[' | b'{' if depth >= MAX_BODY_DEPTH => return Err(NotJson::TooDeep),
            b'[' => lexer
                .discarded()
                .seq(b']', ws_tk, |next, lexer| self.skip(next, lexer, depth + 1))?,
            b'{' => lexer.discarded().seq(b'}', ws_tk, |next, lexer| {
                self.skip(next, lexer, depth + 1)?;
                lexer.expect(ws_tk, b':').ok_or(Expect::Colon)?;
                self.skip(ws_tk(lexer).ok_or(Expect::Value)?, lexer, depth + 1)
            })?,
            _ => return Err(NotJson::Syntax),
        }
        Ok(())
    }

    /// A string's bytes after its opening quote. Invalid UTF-8 is kept as it is, as jaq does;
    /// `bytes` strings (`b"…"`) take `\xHH` and no `\u`.
    fn string(&self, lexer: &mut SliceLexer<'b>, bytes: bool) -> Result<Bytes, NotJson> {
        Ok(match lex_string(lexer, bytes, true)? {
            Text::Borrowed(slice) => self.body.slice_ref(slice),
            Text::Owned(v) => Bytes::from(v),
        })
    }
}

/// An object's key as read: a plain string's bytes (made a value only when the member is
/// kept), or any other value jaq's grammar takes as a key.
enum Key {
    Text(Bytes),
    Value(Val),
}

/// Checks a string after its opening quote as [`Reader::string`] reads it, keeping nothing.
fn skip_string(lexer: &mut SliceLexer<'_>, bytes: bool) -> Result<(), NotJson> {
    lex_string(lexer, bytes, false).map(drop)
}

/// Reads a string after its opening quote: hifijson's string grammar (a control byte or the
/// end of the body inside a string is an error; escapes as [`hifijson::escape::Lex::escape`]
/// reads them), with runs of plain bytes found a word at a time rather than byte by byte —
/// most of a forge payload is strings. `keep`: collect the text (else only check it).
fn lex_string<'b>(
    lexer: &mut SliceLexer<'b>,
    bytes: bool,
    keep: bool,
) -> Result<Text<'b>, NotJson> {
    use hifijson::escape::{Error, Lex as _};
    let mut rest = lexer.as_slice();
    let mut text = Text::Borrowed(&[]);
    loop {
        let run = plain_run(rest);
        if keep {
            match &mut text {
                Text::Borrowed([]) => text = Text::Borrowed(&rest[..run]),
                _ => text.owned().extend_from_slice(&rest[..run]),
            }
        }
        let Some(&end) = rest.get(run) else {
            return Err(NotJson::Syntax);
        };
        rest = &rest[run + 1..];
        match end {
            b'"' => {
                *lexer = SliceLexer::new(rest);
                return Ok(text);
            }
            b'\\' => {
                let mut escape = SliceLexer::new(rest);
                match escape.take_next().ok_or(Error::Eof).map_err(str_error)? {
                    b'u' if bytes => return Err(NotJson::Syntax),
                    b'x' if bytes => {
                        let b = escape.hex::<u8>().map_err(str_error)?;
                        if keep {
                            text.owned().push(b);
                        }
                    }
                    c => {
                        let c = escape.escape(c).map_err(str_error)?;
                        if keep {
                            text.owned()
                                .extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                        }
                    }
                }
                rest = escape.as_slice();
            }
            // A control byte.
            _ => return Err(NotJson::Syntax),
        }
    }
}

/// The length of the run of plain string bytes at the start of `s`: up to the first `"`,
/// `\\` or control byte (below 0x20), or all of `s`.
fn plain_run(s: &[u8]) -> usize {
    let end = memchr::memchr2(b'"', b'\\', s).unwrap_or(s.len());
    let run = &s[..end];
    // Control bytes are rare: one branch-free pass to rule them out, a second to find one.
    if run.iter().fold(0u8, |any, &b| any | u8::from(b < 0x20)) == 0 {
        end
    } else {
        run.iter().position(|&b| b < 0x20).unwrap_or(end)
    }
}

/// Checks a number as [`number`] reads it (a decimal's text is copied and dropped: forge
/// payloads hold few).
fn skip_number(lexer: &mut SliceLexer<'_>) -> Result<(), NotJson> {
    number(lexer).map(drop)
}

fn str_error(_: hifijson::escape::Error) -> NotJson {
    NotJson::Syntax
}

/// A number, as jaq reads it: integers exactly (big ones too), decimals kept as their text.
fn number(lexer: &mut SliceLexer<'_>) -> Result<Num, NotJson> {
    use hifijson::num::LexWrite;
    let (num, parts) = lexer
        .num_string_with(hifijson::num::Num::signed_digits())
        .unvalidated();
    Ok(match num {
        "+" if lexer.strip_prefix(b"Infinity") => Num::Float(f64::INFINITY),
        "-" if lexer.strip_prefix(b"Infinity") => Num::Float(f64::NEG_INFINITY),
        _ if num.ends_with(|c: char| c.is_ascii_digit()) => {
            if parts.is_int() {
                Num::from_str_radix(num, 10).ok_or(NotJson::Syntax)?
            } else {
                Num::Dec(num.to_string().into())
            }
        }
        _ => return Err(NotJson::Syntax),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What jaq's own reader makes of a body (with the depth scan that used to precede it).
    fn jaq(body: &[u8]) -> Val {
        if switchboard_model::body::json_depth(body) <= MAX_BODY_DEPTH
            && let Ok(v) = jaq_json::read::parse_single(body)
        {
            return v;
        }
        Val::from(String::from_utf8_lossy(body).into_owned())
    }

    fn same(body: &[u8]) {
        let ours = parse_payload(&Bytes::copy_from_slice(body));
        let theirs = jaq(body);
        // Read for its type only, every member skipped: a text exactly when the whole read is
        // one (the same grammar and depth bound), the same type and scalar otherwise.
        let typed = parse_payload_reading(&Bytes::copy_from_slice(body), &Projection::TYPE);
        match (&typed, &ours) {
            (Val::Arr(a), Val::Arr(_)) => assert!(a.is_empty()),
            (Val::Obj(o), Val::Obj(_)) => assert!(o.is_empty()),
            _ => assert_eq!(format!("{typed:?}"), format!("{ours:?}")),
        }
        // Debug shows every distinction (text or byte string, integer, float or decimal) and,
        // unlike `==`, finds NaN equal to itself.
        assert_eq!(
            format!("{ours:?}"),
            format!("{theirs:?}"),
            "{}",
            String::from_utf8_lossy(body)
        );
    }

    #[test]
    fn reads_what_jaq_reads() {
        for body in [
            &br#"{"a":1,"b":[true,false,null],"c":"x\"y\u00e9\ud83d\ude00","d":-1.50e3}"#[..],
            br#"  {"k": "plain", "n": 12345678901234567890123} "#,
            br#"[1, 2.0, "three", {"four": [4]}]"#,
            b"\"just a string\"",
            b"42",
            b"# a comment\n{\"a\": 1}",
            br#"b"\x41\x42""#,
            br#"{"1": NaN, "2": Infinity, "3": -Infinity}"#,
            br#"{1: 2}"#,
            br#"{"a": 1, "b": [2, {"a": 3, "a": [4]}], "a": 5, "c": {}}"#,
            br#"[[], [[1, 2], []], {"x": [3]}]"#,
            b"{\"bad\": \"\xff\xfe\"}",
            b"hello=world",
            b"",
            b"{\"a\":1",
            b"{\"a\":1} trailing",
            b"\"tab\tinside\"",
            br#""\q""#,
            br#""\ud800""#,
            b"\"unterminated",
            b"\"ends in a backslash\\",
            b"\"\\nstarts with an escape and ends plain\"",
            br#"b"\x4""#,
            br#""\u00""#,
            b"{\"k\": \"a run longer than a machine word or two, then \\u00e9 and \x01\"}",
            "{\"\u{e9}t\u{e9}\": \"non-ASCII \u{1f600} runs\"}".as_bytes(),
        ] {
            same(body);
        }
    }

    #[test]
    fn reads_every_forge_payload_as_jaq_does() {
        let dir = switchboard_testkit::payloads_dir::webhooks_dir();
        let mut seen = 0;
        for source in std::fs::read_dir(&dir).expect("payload dir") {
            let source = source.expect("entry").path();
            if !source.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(&source).expect("source dir") {
                let file = file.expect("entry").path();
                if file.extension().is_some_and(|e| e == "json") {
                    same(&std::fs::read(&file).expect("payload"));
                    seen += 1;
                }
            }
        }
        assert!(seen > 20, "only {seen} payloads under {}", dir.display());
    }

    #[test]
    fn depth_is_bounded_while_reading() {
        let at = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(matches!(
            parse_payload(&Bytes::from(at(MAX_BODY_DEPTH))),
            Val::Arr(_)
        ));
        assert!(matches!(
            parse_payload(&Bytes::from(at(MAX_BODY_DEPTH + 1))),
            Val::TStr(_)
        ));
        // Far deeper than any stack: stops at the bound, never recurses further.
        let deep = "{\"a\":".repeat(1_000_000);
        assert!(matches!(parse_payload(&Bytes::from(deep)), Val::TStr(_)));
        same(at(MAX_BODY_DEPTH).as_bytes());
        same(at(MAX_BODY_DEPTH + 1).as_bytes());
    }

    #[test]
    fn plain_strings_share_the_body() {
        let body = Bytes::from_static(br#"{"title":"no escapes here"}"#);
        let Val::Obj(m) = parse_payload(&body) else {
            panic!("an object")
        };
        let Some(Val::TStr(title)) = m.values().next() else {
            panic!("a string")
        };
        let range = body.as_ptr() as usize..body.as_ptr() as usize + body.len();
        assert!(range.contains(&(title.as_ptr() as usize)));
    }

    proptest::proptest! {
        #[test]
        fn any_json_reads_as_jaq_reads_it(v in json_value()) {
            same(v.to_string().as_bytes());
            same(serde_json::to_string_pretty(&v).expect("json").as_bytes());
        }

        #[test]
        fn any_string_reads_as_jaq_reads_it(
            text in proptest::collection::vec(
                proptest::sample::select(&b"ab \"\\\\ux0e9D8\x01\x1f\xc3\xa9{}[]:,"[..]), 0..48),
            close in proptest::prelude::any::<bool>(),
        ) {
            let mut body = b"{\"k\": [\"".to_vec();
            body.extend(&text);
            if close {
                body.extend(b"\"]}");
            }
            same(&body);
        }

        #[test]
        fn any_bytes_read_as_jaq_reads_them(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            same(&b);
        }
    }

    fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(serde_json::Value::from),
            ".*".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(serde_json::Value::from),
                prop::collection::btree_map(".*", inner, 0..8)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
