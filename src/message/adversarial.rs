//! Adversarial differential tests: the scanner against serde_json itself (`from_slice` into a
//! `Value`, with duplicate keys refused at every depth), not only against the serde-based oracle,
//! whose raw `id` hides out-of-range numbers and duplicates inside it.

use std::collections::HashSet;
use std::fmt;

use proptest::prelude::*;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::{Envelope, Params, Scalar, oracle, read_envelope};
use crate::protocol::code;

/// A `Value` built with `deserialize_any`, refusing a duplicate key (after unescaping) anywhere.
struct NoDup;

impl<'de> DeserializeSeed<'de> for NoDup {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NoDup {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(NoDup)? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut seen = HashSet::new();
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if !seen.insert(k.clone()) {
                return Err(de::Error::custom("duplicate key"));
            }
            out.insert(k, map.next_value_seed(NoDup)?);
        }
        Ok(Value::Object(out))
    }
}

/// The routing members, in a form both readers can be reduced to.
#[derive(Debug, PartialEq)]
struct Routing {
    jsonrpc: Option<Option<String>>,
    id: Option<Value>,
    method: Option<Option<String>>,
    params: Option<(bool, Option<Option<String>>)>,
}

fn scalar(s: &Option<Scalar<'_>>) -> Option<Option<String>> {
    s.as_ref().map(|s| match s {
        Scalar::Str(s) => Some(s.to_string()),
        Scalar::Other => None,
    })
}

fn from_scanner(e: &Envelope<'_>) -> Routing {
    Routing {
        jsonrpc: scalar(&e.jsonrpc),
        id: e.id.map(|raw| {
            serde_json::from_str::<Value>(raw).unwrap_or_else(|err| {
                panic!("scanner accepted an id serde_json refuses: {raw:?}: {err}")
            })
        }),
        method: scalar(&e.method),
        params: e.params.as_ref().map(
            |Params {
                 is_object, name, ..
             }| (*is_object, scalar(name)),
        ),
    }
}

fn from_value(v: &Map<String, Value>) -> Routing {
    let s = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        _ => None,
    };
    Routing {
        jsonrpc: v.get("jsonrpc").map(s),
        id: v.get("id").cloned(),
        method: v.get("method").map(s),
        params: v.get("params").map(|p| match p {
            Value::Object(p) => (true, p.get("name").map(s)),
            _ => (false, None),
        }),
    }
}

/// serde_json's reading: `Ok` for one object without duplicate keys, else the code to expect.
fn reference(body: &[u8]) -> Result<Routing, i64> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let parsed = NoDup
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    match parsed {
        Ok(Value::Object(map)) => Ok(from_value(&map)),
        Ok(_) => Err(code::INVALID_REQUEST),
        Err(e) if e.is_data() => Err(code::INVALID_REQUEST),
        Err(_) => Err(code::PARSE_ERROR),
    }
}

/// The scanner accepts exactly what serde_json accepts and reads the same routing members.
/// `strict_codes`: also the same error code (for bodies with at most one defect).
fn check(body: &[u8], strict_codes: bool) {
    let scanned = read_envelope(body);
    let expected = reference(body);
    let shown = String::from_utf8_lossy(body);
    let shown: String = if shown.len() > 300 {
        format!(
            "{}…({} bytes)",
            &shown[..shown.floor_char_boundary(300)],
            body.len()
        )
    } else {
        shown.into_owned()
    };
    match (&scanned, &expected) {
        (Ok(a), Ok(b)) => assert_eq!(&from_scanner(a), b, "routing differs on {shown:?}"),
        (Ok(a), Err(c)) => {
            panic!("SCANNER ACCEPTS ({a:?}) what serde_json refuses ({c}): {shown:?}")
        }
        (Err(a), Ok(_)) => panic!(
            "scanner refuses ({}) what serde_json accepts: {shown:?}",
            a.code
        ),
        (Err(a), Err(c)) => {
            if strict_codes {
                assert_eq!(a.code, *c, "codes differ on {shown:?}");
            }
        }
    }
    // The oracle too, where it is not laxer than the scanner.
    if let (Ok(a), Ok(b)) = (&scanned, &oracle::read_envelope(body)) {
        assert_eq!(&a.routing(), b, "oracle differs on {shown:?}");
    }
}

fn msg(inner: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"notes_delete","arguments":{inner}}}}}"#
    )
}

#[test]
fn numbers_at_the_f64_boundaries() {
    let mut numbers: Vec<String> = [
        "1.7976931348623157e308",
        "1.7976931348623158e308",
        "1.79769313486231580793728971405303415079934132710037826936173778668088097e308",
        "1.797693134862315807937289714053034150799e308",
        "1.7976931348623159e308",
        "-1.7976931348623159e308",
        "2e308",
        "1e308",
        "10e307",
        "0.1e309",
        "1e309",
        "1E400",
        "-1E400",
        "1e-400",
        "4.9e-324",
        "2.4703282292062327e-324",
        "2.4703282292062328e-324",
        "0e99999999999999999999",
        "0.0e99999999999999999999",
        "1e99999999999999999999",
        "1e-99999999999999999999",
        "0.1e-2147483647",
        "0.1e-2147483648",
        "10e2147483647",
        "0.01e2147483647",
        "-0",
        "-0.0",
        "-0e0",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "9999999999999999999",
        "-999999999999999999",
        "-9999999999999999999",
        "179769313486231570814527423731704356798070567525844996598917476803157260780028538760589558632766878171540458953514382464234321326889464182768467546703537516986049910576551282076245490090389328944075868508455133942304583236903222948165808559332123348274797826204144723168738177180919299881250404026184124858368",
        "179769313486231580793728971405303415079934132710037826936173778668088097168",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // 2^1024 - 2^970 (the halfway point to infinity) and its neighbours, as full integers.
    let half = "179769313486231580793728971405303415079934132710037826936173778668088097168\
                6765650462089566254734011478089373848066224813880843026254478054466005548034\
                4612519651880102993148003063002896580099694036604633604102584416034226117574\
                4014553858359818342969574640474398779419101470722154051072";
    numbers.push(half.to_owned());
    for tail in ["0", "1", "9"] {
        numbers.push(format!("{}{tail}", &half[..half.len() - 1]));
    }
    numbers.push(format!("{}e0", "9".repeat(400)));
    numbers.push(format!("0.{}1e400", "0".repeat(100)));
    numbers.push(format!("0.{}1e400", "0".repeat(91)));
    numbers.push(format!("{}e-400", "1".repeat(700)));
    numbers.push(format!("1{}", "0".repeat(308)));
    numbers.push(format!("1{}", "0".repeat(309)));
    numbers.push(format!("1.{}", "0".repeat(100_000)));
    let mut failures = Vec::new();
    for n in &numbers {
        for body in [
            format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"m"}}"#),
            msg(&format!("[{n}]")),
        ] {
            if let Err(e) = std::panic::catch_unwind(|| check(body.as_bytes(), true)) {
                let _ = e;
                failures.push(n.clone());
            }
        }
    }
    assert!(failures.is_empty(), "number disagreements: {failures:#?}");
}

#[test]
fn many_keys_with_a_duplicate_at_every_position() {
    for n in [1usize, 2, 15, 16, 17, 18, 33, 40] {
        for dup_of in 0..n {
            for at in 0..=n {
                for nested in [false, true] {
                    for escape in [false, true] {
                        let mut members: Vec<String> = (0..n)
                            .map(|i| {
                                let v = if nested {
                                    // Nested objects between, with their own 0..20 keys.
                                    let inner: Vec<String> =
                                        (0..(i % 21)).map(|j| format!(r#""k{j}":{j}"#)).collect();
                                    format!("{{{}}}", inner.join(","))
                                } else {
                                    i.to_string()
                                };
                                format!(r#""k{i}":{v}"#)
                            })
                            .collect();
                        let key = if escape {
                            // "k" as \u006b, digits as themselves.
                            format!(r"\u006b{dup_of}")
                        } else {
                            format!("k{dup_of}")
                        };
                        members.insert(at, format!(r#""{key}":null"#));
                        let obj = format!("{{{}}}", members.join(","));
                        check(msg(&obj).as_bytes(), true);
                        // Same at the top level and in params.
                        let top = obj.replacen('{', r#"{"jsonrpc":"2.0","id":1,"method":"m","#, 1);
                        check(top.as_bytes(), true);
                    }
                }
            }
        }
        // No duplicate, but the same keys in sibling and nested objects.
        let keys: Vec<String> = (0..n)
            .map(|i| format!(r#""k{i}":{{"k{i}":[{{"k{i}":1}}]}}"#))
            .collect();
        let obj = format!("{{{}}}", keys.join(","));
        check(msg(&format!("[{obj},{obj}]")).as_bytes(), true);
        // The routing keys repeated inside nested objects are fine.
        check(
            format!(r#"{{"x":{obj},"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"a":{{"name":"notes_list"}},"name":"notes_delete","b":{obj}}}}}"#).as_bytes(),
            true,
        );
    }
}

#[test]
fn duplicate_routing_keys_in_every_spelling() {
    let spellings = [
        "method",
        r"\u006dethod",
        r"metho\u0064",
        r"\u006D\u0065thod",
        "method ",
        "Method",
    ];
    for s in spellings {
        check(format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","{s}":"tools/call","params":{{"name":"notes_delete"}}}}"#).as_bytes(), true);
        check(format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"notes_list","{}":"notes_delete"}}}}"#, s.replace("method", "name").replace("metho", "nam")).as_bytes(), true);
    }
    for s in [r"\u0069d", r"i\u0064", "id"] {
        check(
            format!(r#"{{"jsonrpc":"2.0","id":1,"{s}":2,"method":"m"}}"#).as_bytes(),
            true,
        );
    }
    for s in [r"\u0070arams", r"param\u0073", r"params"] {
        check(format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"notes_list"}},"{s}":{{"name":"notes_delete"}}}}"#).as_bytes(), true);
    }
    // Keys equal only after unescaping every escape kind.
    for (a, b) in [
        ("a/b", r"a\/b"),
        ("a\\\\b", r"a\u005cb"),
        (r#"a\"b"#, r"a\u0022b"),
        (r"\n", r"\u000a"),
        (r"\t", r"\u0009"),
        (r"\b", r"\u0008"),
        (r"\f", r"\u000C"),
        (r"\r", r"\u000d"),
        ("é", r"\u00e9"),
        ("€", r"\u20AC"),
        ("😀", r"\ud83d\ude00"),
        ("😀", r"\uD83D\uDE00"),
    ] {
        check(msg(&format!(r#"{{"{a}":1,"{b}":2}}"#)).as_bytes(), true);
        let many: Vec<String> = (0..20)
            .map(|i| format!(r#""f{i}":{{"{a}":{i}}}"#))
            .collect();
        check(
            msg(&format!(r#"{{"{a}":1,{},"{b}":2}}"#, many.join(","))).as_bytes(),
            true,
        );
    }
}

#[test]
fn nesting_near_the_limit() {
    for depth in 120..=132 {
        for (open, close) in [("[", "]"), (r#"{"a":"#, "}"), (r#"[{"a":"#, "}]")] {
            let deep = format!("{}1{}", open.repeat(depth), close.repeat(depth));
            check(
                format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","params":{deep}}}"#).as_bytes(),
                true,
            );
            check(
                format!(r#"{{"jsonrpc":"2.0","id":{deep},"method":"m"}}"#).as_bytes(),
                true,
            );
            check(msg(&deep).as_bytes(), true);
            let empty =
                format!("{}{}", open.repeat(depth), close.repeat(depth)).replace(r#""a":}"#, "}");
            check(msg(&empty).as_bytes(), true);
        }
    }
    // Unbalanced and enormous: no stack overflow.
    check(
        format!("{{\"a\":{}", "[".repeat(1_000_000)).as_bytes(),
        true,
    );
    check(
        format!("{{\"a\":{}", r#"{"a":"#.repeat(200_000)).as_bytes(),
        true,
    );
}

#[test]
fn strings_with_specials_at_every_offset() {
    let specials = [
        r#"\""#,
        r"\\",
        r"\/",
        r"\n",
        r"\u0000",
        r"\u001f",
        r"\u00e9",
        r"\ud83d\ude00",
        r"\ud83d",
        r"\ude00",
        r"\ud83d\u0041",
        r"\ud83d\n",
        r"\u",
        r"\u12",
        r"\uZZZZ",
        r"\x",
        "\\'",
        "\u{0}",
        "\u{1}",
        "\u{1f}",
        "\t",
        "\n",
        "\u{7f}",
        " ",
        "\"",
        "é",
        "€",
        "😀",
        "\u{2028}",
        "\u{feff}",
        "\u{ffff}",
        "\\",
    ];
    let fillers = ["x", "é", "€", "😀"];
    for special in specials {
        for filler in fillers {
            for at in 0..24 {
                let text: String = (0..24)
                    .map(|i| {
                        if i == at {
                            special
                        } else if i % 5 == 2 {
                            filler
                        } else {
                            "x"
                        }
                    })
                    .collect();
                for body in [
                    format!(r#"{{"jsonrpc":"2.0","id":"{text}","method":"{text}","{text}":1}}"#),
                    format!(
                        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{text}"}}}}"#
                    ),
                    format!(
                        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{text}{filler}"}}}}"#
                    ),
                    msg(&format!(r#"{{"{text}":1,"{text}":2}}"#)),
                ] {
                    check(body.as_bytes(), false);
                }
            }
        }
    }
    // A long string, and one ending at every offset of the body (unterminated).
    let long = "ab€é😀".repeat(10_000);
    let body = msg(&format!(r#"["{long}"]"#));
    check(body.as_bytes(), true);
    for cut in (0..body.len()).step_by(997) {
        if body.is_char_boundary(cut) {
            check(&body.as_bytes()[..cut], false);
        }
    }
    // Non-ASCII right before the closing quote, at every alignment, and before a backslash.
    for pad in 0..16 {
        for c in ["é", "€", "😀", "\u{80}", "\u{7ff}", "\u{800}", "\u{10ffff}"] {
            let s = format!("{}{c}", "x".repeat(pad));
            check(
                format!(r#"{{"jsonrpc":"2.0","id":"{s}","method":"{s}"}}"#).as_bytes(),
                true,
            );
            let s = format!(r#"{}{c}\"{c}\\"#, "x".repeat(pad));
            check(
                format!(r#"{{"jsonrpc":"2.0","id":"{s}","method":"{s}"}}"#).as_bytes(),
                true,
            );
        }
    }
}

#[test]
fn whitespace_literals_and_trailing_content() {
    let ws = [
        " ", "\t", "\n", "\r", "\u{c}", "\u{b}", "\u{a0}", "\u{feff}", "\u{2028}", "\u{0}",
    ];
    for w in ws {
        for body in [
            format!(r#"{w}{{"jsonrpc":"2.0","id":1,"method":"m"}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m"}}{w}"#),
            format!(r#"{{{w}"jsonrpc"{w}:{w}"2.0"{w},"id":[{w}1{w},{w}2{w}],"method":"m"{w}}}"#),
        ] {
            check(body.as_bytes(), true);
        }
    }
    for lit in [
        "true",
        "false",
        "null",
        "tru",
        "nul",
        "fals",
        "True",
        "NULL",
        "truex",
        "nulll",
        "NaN",
        "Infinity",
        "-Infinity",
        "+1",
        ".5",
        "5.",
        "0x10",
        "1_000",
        "- 1",
        "1e",
        "1e+",
        "--1",
    ] {
        check(
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","x":{lit}}}"#).as_bytes(),
            true,
        );
        check(
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m","x":[{lit}]}}"#).as_bytes(),
            true,
        );
    }
    for trailing in ["{}", "x", ",", "]", "}", "\"", "/", "//c", "/*c*/", "\u{0}"] {
        check(
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"m"}}{trailing}"#).as_bytes(),
            true,
        );
    }
    // Truncations of a valid message at every byte.
    let body = msg(r#"{"t":"é€😀\n","n":[1.5e3,-0,true,null,{}]}"#);
    for cut in 0..body.len() {
        check(&body.as_bytes()[..cut], false);
    }
}

// ---- Generated inputs ----

fn leaf() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        "-?(0|[1-9][0-9]{0,30})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,4})?",
        "-?1\\.79769313486231[5-6][0-9]{0,6}[eE]308",
        "-?[0-9]{300,312}",
        "0e[0-9]{1,25}",
        "\"([a-z ]|\\\\[nrtbf\"/\\\\]|\\\\u[0-9a-fA-F]{4}|\\\\u[dD][89abAB][0-9a-f]{2}\\\\u[dD][c-fC-F][0-9a-f]{2}|é|€|😀|\t|\u{7f}){0,12}\"",
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-c]",
        Just("name".to_owned()),
        Just("method".to_owned()),
        Just("id".to_owned()),
        Just("params".to_owned()),
        Just("jsonrpc".to_owned()),
        Just("\\u0061".to_owned()),
        Just("\\u006eame".to_owned()),
        Just("metho\\u0064".to_owned()),
        Just("a\\/".to_owned()),
        Just("a/".to_owned()),
        "k[0-9]{1,2}",
    ]
}

fn value() -> impl Strategy<Value = String> {
    leaf().prop_recursive(5, 64, 24, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((key(), inner), 0..24).prop_map(|m| {
                let m: Vec<String> = m.into_iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", m.join(","))
            }),
        ]
    })
}

fn message() -> impl Strategy<Value = String> {
    (
        prop::option::of(prop_oneof![3 => Just("\"2.0\"".to_owned()), 1 => value()]),
        prop::option::of(prop_oneof![Just("1".to_owned()), Just("\"a\"".to_owned()), value()]),
        prop::option::of(prop_oneof![3 => Just("\"tools/call\"".to_owned()), 1 => value()]),
        prop::option::of(prop_oneof![
            3 => (prop_oneof![Just("\"notes_delete\"".to_owned()), value()], prop::collection::vec((key(), value()), 0..20))
                .prop_map(|(name, rest)| {
                    let mut m = vec![format!("\"name\":{name}")];
                    m.extend(rest.into_iter().map(|(k, v)| format!("\"{k}\":{v}")));
                    format!("{{{}}}", m.join(","))
                }),
            1 => value(),
        ]),
        prop::collection::vec((key(), value()), 0..4),
        any::<bool>(),
    )
        .prop_map(|(jsonrpc, id, method, params, extra, shuffle)| {
            let mut m = Vec::new();
            for (k, v) in [("jsonrpc", jsonrpc), ("id", id), ("method", method), ("params", params)] {
                if let Some(v) = v {
                    m.push(format!("\"{k}\":{v}"));
                }
            }
            m.extend(extra.into_iter().map(|(k, v)| format!("\"{k}\":{v}")));
            if shuffle {
                m.reverse();
            }
            format!("{{{}}}", m.join(","))
        })
}

#[derive(Debug, Clone)]
enum Edit {
    Set(prop::sample::Index, u8),
    Insert(prop::sample::Index, Vec<u8>),
    Delete(prop::sample::Index, usize),
    /// Copy a slice of the body elsewhere (duplicates members, keys, escapes).
    Copy(prop::sample::Index, prop::sample::Index, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let byte = prop_oneof![
        prop::sample::select(b"{}[]\",:\\ 0-+.eEu/abnrtf19\t\n\r".to_vec()),
        any::<u8>(),
    ];
    let chunk = prop_oneof![
        prop::sample::select(vec![
            "é",
            "€",
            "😀",
            "\\u",
            "\\ud83d",
            "\\ude00",
            "\\u0000",
            "\\\"",
            "\"name\":",
            "\"method\":",
            "\\u006e",
            ",\"a\":1",
            "e308",
            "e-400",
            "9999999999999999999999",
            "\u{c}",
            "\u{a0}",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        prop::collection::vec(any::<u8>(), 1..4),
    ];
    prop_oneof![
        (any::<prop::sample::Index>(), byte).prop_map(|(i, b)| Edit::Set(i, b)),
        (any::<prop::sample::Index>(), chunk).prop_map(|(i, c)| Edit::Insert(i, c)),
        (any::<prop::sample::Index>(), 1usize..6).prop_map(|(i, n)| Edit::Delete(i, n)),
        (
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
            1usize..40
        )
            .prop_map(|(a, b, n)| Edit::Copy(a, b, n)),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: Vec<Edit>) -> Vec<u8> {
    for e in edits {
        let len = bytes.len();
        match e {
            Edit::Set(i, b) if len > 0 => bytes[i.index(len)] = b,
            Edit::Set(..) => {}
            Edit::Insert(i, c) => {
                let at = i.index(len + 1);
                bytes.splice(at..at, c);
            }
            Edit::Delete(i, n) if len > 0 => {
                let at = i.index(len);
                bytes.drain(at..(at + n).min(len));
            }
            Edit::Delete(..) => {}
            Edit::Copy(from, to, n) if len > 0 => {
                let a = from.index(len);
                let piece = bytes[a..(a + n).min(len)].to_vec();
                let at = to.index(len + 1);
                bytes.splice(at..at, piece);
            }
            Edit::Copy(..) => {}
        }
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(400), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        check(&bytes, false);
        let mut framed = b"{\"a\":".to_vec();
        framed.extend_from_slice(&bytes);
        framed.push(b'}');
        check(&framed, false);
    }

    #[test]
    fn random_json_alphabet(bytes in prop::collection::vec(prop::sample::select(b"{}[]\",:\\ 0129-+.eEuabnrtfl\xc3\xa9".to_vec()), 0..80)) {
        let mut framed = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"x\":".to_vec();
        framed.extend_from_slice(&bytes);
        framed.push(b'}');
        check(&framed, false);
    }

    #[test]
    fn generated_against_serde_json(text in message()) {
        check(text.as_bytes(), false);
    }

    #[test]
    fn mutated_against_serde_json(text in message(), edits in prop::collection::vec(edit(), 1..5)) {
        check(&apply(text.into_bytes(), edits), false);
    }
}

#[test]
fn numbers_near_the_f64_limit_are_read_as_serde_json_reads_them() {
    use super::{Parsed, classify};
    use bytes::Bytes;
    let mut refused = 0;
    for n in [
        "1.7976931348623157e308",
        "1.7976931348623158e308",
        "1.797693134862315650e308",
        "1.7976931348623159e308",
        "1e309",
        "-1.7976931348623159e308",
    ] {
        let serde_refuses = serde_json::from_str::<serde_json::Value>(&format!("[{n}]")).is_err();
        refused += usize::from(serde_refuses);
        for tool in ["notes_delete", "notes_list"] {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{"x":{n}}}}}}}"#
            );
            let parsed = classify(&Bytes::from(body), |t| (t == "notes_delete").then_some(()));
            // A number serde_json refuses, the scanner refuses too (-32700), guarded tool or not.
            let rejected =
                matches!(&parsed, Parsed::Reject { error, .. } if error.code == code::PARSE_ERROR);
            assert_eq!(rejected, serde_refuses, "{n} {tool}: {parsed:?}");
        }
    }
    assert!(
        refused >= 2,
        "the list must keep numbers serde_json refuses"
    );
}

/// Each row of the contract table in `message/mod.rs`, on serde_json alone: an upgrade that moves
/// one fails here by name, even where the differential tests would only say "differs".
#[test]
fn serde_json_behaves_as_the_scanner_assumes() {
    let parses = |text: &str| serde_json::from_str::<Value>(text).is_ok();
    // Depth: 127 nested containers read, the 128th refused.
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    assert!(parses(&nested(127)));
    assert!(!parses(&nested(128)));
    assert_eq!(super::scan::MAX_DEPTH, 127);
    // Numbers: the f64 range, integers past 64 bits as floats.
    assert!(parses("1.7976931348623157e308"));
    assert!(!parses("1e309"));
    assert!(!parses("-1e309"));
    assert!(parses("18446744073709551616"));
    assert!(parses("1e-400"));
    // Text: no raw control characters; surrogates only in pairs; valid UTF-8 only.
    assert!(!parses("\"a\u{1}b\""));
    assert!(!parses(r#""\ud800""#));
    assert!(!parses(r#""\udc00\ud800""#));
    assert!(parses(r#""\ud83d\ude00""#));
    assert!(serde_json::from_slice::<Value>(b"\"\xff\"").is_err());
    // Grammar: one value, no trailing commas, whitespace only around it.
    assert!(!parses("[1,]"));
    assert!(!parses("{} {}"));
    assert!(parses(" \n{}\t "));
    // Duplicate keys: serde_json takes the last one, which is why the scanner refuses them.
    let last: Value = serde_json::from_str(r#"{"a":1,"a":2}"#).unwrap();
    assert_eq!(last["a"], 2);
    assert!(read_envelope(br#"{"jsonrpc":"2.0","id":1,"method":"m","method":"n"}"#).is_err());
}
