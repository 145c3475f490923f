//! The stable-toolchain fallback for the fuzz targets in `fuzz/`, and their regression tests.
//!
//! The same target bodies as `cargo fuzz` runs (`fuzz/src/lib.rs`, included below), fed by
//! proptest instead of libFuzzer: arbitrary bytes, mutated seeds from `fuzz/seeds/<target>/`, and
//! structured-but-random inputs (token payloads byte by byte, JSON-RPC messages, `inputResponses`
//! values). The crate's `__fuzz` entry points assert the invariants; a panic is a finding.
//!
//! Case counts are modest so that `cargo test --all-features` stays quick; `PROPTEST_CASES` raises
//! them (`.ci/fuzz.sh` does when no nightly toolchain is there for libFuzzer). Every crash found by
//! either fuzzer is replayed by a test in `regressions` below.
#![cfg(feature = "fuzzing")]

#[path = "../fuzz/src/lib.rs"]
#[allow(dead_code, unreachable_pub)]
mod targets;

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;

/// A proptest config with `PROPTEST_CASES` cases if set, else `default`.
fn config(default: u32) -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Config {
        cases,
        ..Config::default()
    }
}

fn seed_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target)
}

/// The committed seeds of a target, in name order.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = seed_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files
        .iter()
        .map(|f| std::fs::read(f).expect("a readable seed"))
        .collect();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

// ---------------------------------------------------------------------------------------------
// Mutations of seeds, in the spirit of libFuzzer's: byte changes, insertions of dictionary words,
// deletions, duplicated ranges, truncations.

#[derive(Debug, Clone)]
enum Edit {
    Set(Index, u8),
    Insert(Index, Vec<u8>),
    Delete(Index, usize),
    Duplicate(Index, Index),
    Truncate(Index),
}

fn edit(dict: &'static [&'static [u8]]) -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => (any::<Index>(), any::<u8>()).prop_map(|(at, b)| Edit::Set(at, b)),
        4 => (any::<Index>(), prop::sample::select(dict)).prop_map(|(at, w)| Edit::Insert(at, w.to_vec())),
        1 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..4)).prop_map(|(at, w)| Edit::Insert(at, w)),
        2 => (any::<Index>(), 1usize..8).prop_map(|(at, n)| Edit::Delete(at, n)),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Edit::Duplicate(a, b)),
        1 => any::<Index>().prop_map(Edit::Truncate),
    ]
}

fn apply(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let len = bytes.len();
        match e {
            Edit::Set(at, b) if len > 0 => bytes[at.index(len)] = *b,
            Edit::Set(..) => bytes.push(0),
            Edit::Insert(at, word) => {
                let i = at.index(len + 1);
                bytes.splice(i..i, word.iter().copied());
            }
            Edit::Delete(at, n) if len > 0 => {
                let i = at.index(len);
                bytes.drain(i..(i + n).min(len));
            }
            Edit::Duplicate(a, b) if len > 0 => {
                let (x, y) = (a.index(len), b.index(len));
                let range = bytes[x.min(y)..=x.max(y)].to_vec();
                bytes.splice(x..x, range);
            }
            Edit::Truncate(at) => bytes.truncate(at.index(len + 1)),
            _ => {}
        }
    }
    bytes
}

fn mutated(target: &str, dict: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> + use<> {
    (
        prop::sample::select(seeds(target)),
        prop::collection::vec(edit(dict), 1..6),
    )
        .prop_map(|(seed, edits)| apply(seed, &edits))
}

const JSON_WORDS: &[&[u8]] = &[
    b"\"",
    b"\\",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b" ",
    b"\n",
    b"\t",
    b"\x00",
    b"\x1f",
    b"\x7f",
    b"\xff",
    b"\xc3",
    b"\xe2\x80\xae",
    b"\\u0000",
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude00",
    b"\\u005f",
    b"\\/",
    b"0",
    b"-0",
    b"1e400",
    b"1.7976931348623158e308",
    b"-",
    b"e",
    b".5",
    b"18446744073709551616",
    b"null",
    b"true",
    b"false",
    b"{}",
    b"[]",
    b"\"jsonrpc\":\"2.0\"",
    b"\"id\":",
    b"\"method\":",
    b"\"params\":",
    b"\"name\":",
    b"\"notes_delete\"",
    b"\"tools/call\"",
    b"\"arguments\":",
    b"\"_meta\":",
    b"\"requestState\":",
    b"\"inputResponses\":",
    b"\"delete_choice\":",
    b"\"action\":",
    b"\"accept\"",
    b"\"decline\"",
    b"\"cancel\"",
    b"\"content\":",
    b"\"note_id\":",
    b"\"confirm\":",
    b"\"note-3\"",
    b"\"note-7\"",
    b"\"note-14\"",
    b"\"note-99\"",
];

const TOKEN_WORDS: &[&[u8]] = &[
    b"mcpc1.",
    b"mcpc1",
    b"=",
    b"==",
    b"+",
    b"/",
    b"-",
    b"_",
    b"A",
    b"AA",
    b"AAA",
    b"AAAA",
    b"Ag",
    b"AgJrMQ",
    b"\x00",
    b"\x01",
    b"\x02",
    b"\x10",
    b"\x11",
    b"\x80",
    b"\x81",
    b"\xff",
    b"k1",
    b"\xc3\xa9",
];

// ---------------------------------------------------------------------------------------------
// Structured inputs.

/// A `requestState` payload built field by field (`src/token/claims.rs`), mostly well formed, with
/// the edges of each bound mixed in: phase, candidate count, id and version lengths around their
/// limits, non-UTF-8 text, duplicate ids, a wrong count, trailing bytes.
fn claims_payload() -> impl Strategy<Value = Vec<u8>> {
    let text = |max: usize| {
        prop_oneof![
            6 => "[a-z0-9-]{1,12}".prop_map(String::into_bytes),
            1 => Just(vec![]),
            1 => (max - 1..=max + 1).prop_map(|n| vec![b'x'; n]),
            1 => Just("é".repeat(max / 2).into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 1..6),
        ]
    };
    let candidate = (
        text(128),
        prop_oneof![3 => Just(vec![]), 5 => text(128)],
        prop::bool::weighted(0.05),
    );
    (
        prop_oneof![9 => Just(1u8), 1 => any::<u8>()],
        prop::collection::vec(any::<u8>(), 176),
        prop::collection::vec(candidate, 0..=17),
        prop_oneof![9 => Just(None), 1 => any::<u8>().prop_map(Some)],
        prop_oneof![9 => Just(vec![]), 1 => prop::collection::vec(any::<u8>(), 1..4)],
        prop_oneof![9 => Just(None), 1 => any::<Index>().prop_map(Some)],
    )
        .prop_map(|(phase, fixed, candidates, count, trailing, cut)| {
            let mut out = vec![phase];
            out.extend_from_slice(&fixed);
            out.push(count.unwrap_or(candidates.len() as u8));
            let mut ids: Vec<Vec<u8>> = Vec::new();
            for (id, version, repeat) in candidates {
                let id = match ids.last() {
                    Some(previous) if repeat => previous.clone(),
                    _ => id,
                };
                out.push(id.len() as u8);
                out.extend_from_slice(&id);
                out.push(version.len() as u8);
                out.extend_from_slice(&version);
                ids.push(id);
            }
            out.extend_from_slice(&trailing);
            if let Some(cut) = cut {
                out.truncate(cut.index(out.len() + 1));
            }
            out
        })
}

fn json_string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z_ -]{0,8}",
        1 => "([a-z]|\\\\[nrtbf\"/\\\\]|\\\\u00e9|\\\\u0000|\\\\ud83d\\\\ude00|\\\\ud800|\\\\udc00|é|\t|\u{7f}){0,6}",
    ]
    .prop_map(|s| format!("\"{s}\""))
}

fn json_number() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,3})?([eE][+-]?[0-9]{1,3})?",
        1 => prop::sample::select(vec![
            "-0", "01", "1.", ".5", "1e", "1e400", "-1e400", "0e400", "1e-400",
            "1.7976931348623157e308", "1.7976931348623158e308", "18446744073709551615",
            "18446744073709551616", "-9223372036854775809", "1E+2",
        ])
        .prop_map(str::to_owned),
    ]
}

/// JSON-ish text with object keys from `keys`: mostly valid, sometimes not quite.
fn json_text(keys: &'static [&'static str]) -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        json_number(),
        json_string(),
    ];
    leaf.prop_recursive(5, 40, 5, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5)
                .prop_map(|items| format!("[{}]", items.join(","))),
            prop::collection::vec((prop::sample::select(keys), inner), 0..5).prop_map(|members| {
                let body: Vec<String> = members
                    .into_iter()
                    .map(|(k, v)| format!("\"{k}\":{v}"))
                    .collect();
                format!("{{{}}}", body.join(","))
            }),
        ]
    })
}

/// Containers nested around serde_json's recursion limit (128).
fn deep_text() -> impl Strategy<Value = String> {
    (120usize..132, any::<bool>()).prop_map(|(depth, objects)| {
        if objects {
            format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
        } else {
            format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
        }
    })
}

const KEYS: &[&str] = &[
    "a", "b", "id", "name", "method", "params", "jsonrpc", "note_id", "confirm", "action",
    "content", "\\u0061",
];

/// One member as text, `"key":value`; the key sometimes spelled with escapes.
fn member(key: &'static str, value: String, escaped: bool) -> String {
    if escaped {
        let (first, rest) = key.split_at(1);
        format!(
            "\"\\u{:04x}{rest}\":{value}",
            u32::from(first.as_bytes()[0])
        )
    } else {
        format!("\"{key}\":{value}")
    }
}

/// A JSON-RPC message shaped like a `tools/call`: the routing members drawn from values the
/// scanner must tell apart, members in any order, sometimes repeated.
fn rpc_body() -> impl Strategy<Value = Vec<u8>> {
    let jsonrpc = prop_oneof![
        8 => Just("\"2.0\"".to_owned()),
        1 => prop::sample::select(vec!["\"1.0\"", "2", "\"2\\u002e0\"", "null"]).prop_map(str::to_owned),
    ];
    let id = prop_oneof![
        4 => json_number(),
        3 => json_string(),
        1 => prop::sample::select(vec!["null", "{}", "[]", "{\"a\":1,\"a\":2}", "true"]).prop_map(str::to_owned),
    ];
    let method = prop_oneof![
        8 => Just("\"tools/call\"".to_owned()),
        1 => prop::sample::select(vec!["\"tools\\/call\"", "\"tools/list\"", "null", "[\"tools/call\"]"]).prop_map(str::to_owned),
    ];
    let name = prop_oneof![
        8 => Just("\"notes_delete\"".to_owned()),
        2 => prop::sample::select(vec!["\"notes\\u005fdelete\"", "\"notes_list\"", "7", "null", "\"notes_delete \""]).prop_map(str::to_owned),
    ];
    let params = (
        prop::option::weighted(0.9, name),
        prop::option::of(json_text(KEYS)),
        prop::option::of(json_text(KEYS)),
        prop::option::of(prop_oneof![json_string(), json_text(KEYS)]),
        prop::option::of(json_text(KEYS)),
        any::<bool>(),
    )
        .prop_map(|(name, arguments, meta, state, responses, escaped)| {
            let mut members = Vec::new();
            for (key, value) in [
                ("name", name),
                ("arguments", arguments),
                ("_meta", meta),
                ("requestState", state),
                ("inputResponses", responses),
            ] {
                if let Some(value) = value {
                    members.push(member(key, value, escaped && key == "name"));
                }
            }
            format!("{{{}}}", members.join(","))
        });
    let params = prop_oneof![
        8 => params,
        1 => json_text(KEYS),
        1 => deep_text(),
    ];
    (
        prop::option::weighted(0.95, jsonrpc),
        prop::option::weighted(0.9, id),
        prop::option::weighted(0.95, method),
        prop::option::weighted(0.95, params),
        prop::collection::vec((prop::sample::select(KEYS), json_text(KEYS)), 0..3),
        any::<bool>(),
        prop::sample::select(vec!["", " ", "\n", "\r\n\t "]),
    )
        .prop_flat_map(|(jsonrpc, id, method, params, extra, escaped, space)| {
            let mut members = Vec::new();
            for (key, value) in [
                ("jsonrpc", jsonrpc),
                ("id", id),
                ("method", method),
                ("params", params),
            ] {
                if let Some(value) = value {
                    members.push(member(key, value, escaped && key == "id"));
                }
            }
            members.extend(extra.into_iter().map(|(k, v)| member(k, v, false)));
            (Just(members).prop_shuffle(), Just(space))
        })
        .prop_map(|(members, space)| {
            format!("{space}{{{}}}{space}", members.join(&format!(",{space}"))).into_bytes()
        })
}

/// An `inputResponses` value for the pick-one form `__fuzz::read_answer` reads (`delete_choice`
/// → `note_id` among note-3, note-7, note-14, and `confirm`), with near misses of every part.
fn input_responses() -> impl Strategy<Value = Vec<u8>> {
    let choice = prop::sample::select(vec![
        "\"note-3\"",
        "\"note-7\"",
        "\"note-14\"",
        "\"note-99\"",
        "\"note-3 \"",
        "\"note\\u002d7\"",
        "\"\"",
        "7",
        "null",
        "[\"note-3\"]",
    ]);
    let confirm = prop::sample::select(vec!["true", "false", "\"true\"", "1", "null"]);
    let content = prop_oneof![
        6 => (
            prop::option::weighted(0.9, choice),
            prop::option::weighted(0.9, confirm),
            prop::option::weighted(0.1, json_text(KEYS)),
            any::<bool>(),
        )
            .prop_map(|(choice, confirm, extra, repeat)| {
                let mut members = Vec::new();
                if let Some(c) = choice {
                    members.push(format!("\"note_id\":{c}"));
                }
                if let Some(c) = confirm {
                    members.push(format!("\"confirm\":{c}"));
                }
                if let Some(e) = extra {
                    members.push(format!("\"extra\":{e}"));
                }
                if repeat {
                    // serde_json keeps the last of a repeated key; so must the check.
                    members.push("\"note_id\":\"note-99\"".to_owned());
                    members.rotate_right(1);
                }
                format!("{{{}}}", members.join(","))
            }),
        1 => json_text(KEYS),
    ];
    let action = prop::sample::select(vec![
        "\"accept\"",
        "\"accept\"",
        "\"accept\"",
        "\"decline\"",
        "\"cancel\"",
        "\"ACCEPT\"",
        "\"accept\\u0000\"",
        "1",
        "null",
    ]);
    let response = prop_oneof![
        8 => (prop::option::weighted(0.95, action), prop::option::weighted(0.9, content))
            .prop_map(|(action, content)| {
                let mut members = Vec::new();
                if let Some(a) = action {
                    members.push(format!("\"action\":{a}"));
                }
                if let Some(c) = content {
                    members.push(format!("\"content\":{c}"));
                }
                format!("{{{}}}", members.join(","))
            }),
        1 => json_text(KEYS),
    ];
    let key = prop::sample::select(vec![
        "delete_choice",
        "delete_choice",
        "delete_choice",
        "delete_\\u0063hoice",
        "confirm",
        "other",
    ]);
    prop_oneof![
        9 => prop::collection::vec((key, response), 0..3).prop_map(|members| {
            let body: Vec<String> = members
                .into_iter()
                .map(|(k, v)| format!("\"{k}\":{v}"))
                .collect();
            format!("{{{}}}", body.join(",")).into_bytes()
        }),
        1 => json_text(KEYS).prop_map(String::into_bytes),
    ]
}

// ---------------------------------------------------------------------------------------------
// The harnesses. Names start with the fuzz target's, so `.ci/fuzz.sh` can run one target's.

/// One input, printed as a byte-string literal, so a failure reads as the `b"..."` a regression
/// test replays.
#[derive(Clone)]
struct Input(Vec<u8>);

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

fn input(bytes: impl Strategy<Value = Vec<u8>>) -> impl Strategy<Value = Input> {
    bytes.prop_map(Input)
}

fn arbitrary(max_len: usize) -> impl Strategy<Value = Input> {
    input(prop::collection::vec(any::<u8>(), 0..max_len))
}

/// `bytes`, then a few edits.
fn edited(
    bytes: impl Strategy<Value = Vec<u8>>,
    dict: &'static [&'static [u8]],
) -> impl Strategy<Value = Input> {
    input(
        (bytes, prop::collection::vec(edit(dict), 1..4))
            .prop_map(|(bytes, edits)| apply(bytes, &edits)),
    )
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn token_decode_arbitrary_bytes(data in arbitrary(600)) {
        targets::token_decode(&data.0);
    }

    #[test]
    fn token_decode_mutated_seeds(data in input(mutated("token_decode", TOKEN_WORDS))) {
        targets::token_decode(&data.0);
    }

    #[test]
    fn token_decode_structured_payloads(data in input(claims_payload())) {
        targets::token_decode(&data.0);
    }

    #[test]
    fn token_decode_mutated_tokens(data in edited(claims_payload().prop_map(|p| targets::forge(&p).into_bytes()), TOKEN_WORDS)) {
        targets::token_decode(&data.0);
    }

    #[test]
    fn scan_body_arbitrary_bytes(data in arbitrary(300)) {
        targets::scan_body(&data.0);
    }

    #[test]
    fn scan_body_mutated_seeds(data in input(mutated("scan_body", JSON_WORDS))) {
        targets::scan_body(&data.0);
    }

    #[test]
    fn scan_body_structured_messages(data in input(rpc_body())) {
        targets::scan_body(&data.0);
    }

    #[test]
    fn scan_body_mutated_messages(data in edited(rpc_body(), JSON_WORDS)) {
        targets::scan_body(&data.0);
    }

    #[test]
    fn layer_forward_mutated_seeds(data in input(mutated("layer_forward", JSON_WORDS))) {
        targets::layer_forward(&data.0);
    }

    #[test]
    fn layer_forward_structured_messages(data in input(rpc_body())) {
        targets::layer_forward(&data.0);
    }

    #[test]
    fn layer_forward_mutated_messages(data in edited(rpc_body(), JSON_WORDS)) {
        targets::layer_forward(&data.0);
    }

    #[test]
    fn read_answer_arbitrary_bytes(data in arbitrary(300)) {
        targets::read_answer(&data.0);
    }

    #[test]
    fn read_answer_mutated_seeds(data in input(mutated("read_answer", JSON_WORDS))) {
        targets::read_answer(&data.0);
    }

    #[test]
    fn read_answer_structured_responses(data in input(input_responses())) {
        targets::read_answer(&data.0);
    }
}

// ---------------------------------------------------------------------------------------------
// Seeds and the forging helper stay true to the crate.

/// The token seeds that depend on the format: the sealed sample state, its payload, and payloads
/// at the bounds (no candidates; 16 candidates with the longest ids and versions).
fn token_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let sample = mcp_confirm::__bench::sample_payload();
    let ring = mcp_confirm::KeyRing::single(targets::KEY_ID, targets::SECRET).expect("a ring");
    let sealed = mcp_confirm::__bench::seal_sample(&ring);
    // The sample's fixed part ends where its candidate count (3) and first candidate start.
    let first = b"\x03\x06note-3";
    let at = sample
        .windows(first.len())
        .position(|w| w == first)
        .expect("the sample state's first candidate is note-3");
    let fixed = &sample[..at];
    let mut empty = fixed.to_vec();
    empty.push(0);
    let mut full = fixed.to_vec();
    full.push(16);
    for i in 0..16u8 {
        let id = format!("{i:0>128}");
        full.push(128);
        full.extend_from_slice(id.as_bytes());
        full.push(128);
        full.extend_from_slice(&[b'v'; 128]);
    }
    vec![
        ("seed-sealed-sample", sealed.into_bytes()),
        ("seed-payload-sample", sample),
        ("seed-payload-no-candidates", empty),
        ("seed-payload-sixteen-longest", full),
    ]
}

/// The committed token seeds are what the crate seals today (a format change makes them stale:
/// rewrite them with `MCP_CONFIRM_WRITE_SEEDS=1 cargo test --all-features --test fuzz_fallback
/// seeds_are_current`).
#[test]
fn seeds_are_current() {
    let dir = seed_dir("token_decode");
    let write = std::env::var_os("MCP_CONFIRM_WRITE_SEEDS").is_some();
    for (name, bytes) in token_seeds() {
        let path = dir.join(name);
        if write {
            std::fs::write(&path, &bytes).expect("a writable seed directory");
        }
        assert_eq!(
            std::fs::read(&path).ok().as_deref(),
            Some(bytes.as_slice()),
            "{} is stale",
            path.display()
        );
    }
    // Every target has seeds, and every seed runs clean.
    for target in ["token_decode", "scan_body", "read_answer", "layer_forward"] {
        assert!(seeds(target).len() >= 4, "{target}");
    }
    for seed in seeds("token_decode") {
        targets::token_decode(&seed);
    }
    for seed in seeds("scan_body") {
        targets::scan_body(&seed);
    }
    for seed in seeds("read_answer") {
        targets::read_answer(&seed);
    }
    for seed in seeds("layer_forward") {
        targets::layer_forward(&seed);
    }
}

/// `layer_forward` sees what reaches the inner service: a forwarded call is recorded, and an
/// unconfirmed guarded call that got through would be caught (the check is not vacuous).
#[test]
fn forwarded_check_is_not_vacuous() {
    let list = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_list"}}"#;
    targets::layer_forward(list);
    let delete =
        br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"notes_delete"}}"#;
    let caught = std::panic::catch_unwind(|| targets::forwarded_check(delete, false));
    assert!(
        caught.is_err(),
        "the check must refuse an unconfirmed delete"
    );
    targets::forwarded_check(delete, true);
    targets::forwarded_check(list, false);
}

/// The forging helper seals exactly as the crate does (else `token_decode` never gets past the
/// MAC), and what it forges opens.
#[test]
fn forged_tokens_match_the_crate() {
    targets::check_forgery();
    let ring = mcp_confirm::KeyRing::single(targets::KEY_ID, targets::SECRET).expect("a ring");
    let sample = mcp_confirm::__bench::sample_payload();
    assert!(mcp_confirm::__bench::open(&ring, &targets::forge(&sample)));
    let mut flipped = sample.clone();
    flipped[1] ^= 1;
    assert!(mcp_confirm::__bench::open(&ring, &targets::forge(&flipped)));
    assert!(!mcp_confirm::__bench::open(&ring, &targets::wrap(&flipped)));
}

// ---------------------------------------------------------------------------------------------
// Regressions: each crash either fuzzer found, replayed byte for byte.

mod regressions {
    // One `#[test]` per finding: `super::targets::<target>(b"<the exact input>")`, named after
    // what it found, with the artifact's name and the date in a comment.
}
