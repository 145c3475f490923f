//! `mcp-confirm-audit`: checks an mcp-confirm decision log offline, with nothing but its
//! directory and the log's public key, and answers questions about it.
//!
//! ```text
//! mcp-confirm-audit verify --dir DIR --key VKEY [--seen CHECKPOINT_FILE]... [--witness DIR]...
//! mcp-confirm-audit prove  --dir DIR --key VKEY --seq N         (inclusion in the newest checkpoint)
//! mcp-confirm-audit prove  --dir DIR --key VKEY --from FILE     (an older checkpoint is a prefix of the newest)
//! mcp-confirm-audit check-proof --key VKEY --proof FILE          (checks either proof `prove` printed)
//! mcp-confirm-audit show   --dir DIR [--key VKEY] [--event E] [--tool T] [--chosen ID] [--subject S]
//! mcp-confirm-audit export --dir DIR                               (every record, JSON lines)
//! mcp-confirm-audit pull   --postgres URL [--table T] --dir DIR   (a PostgreSQL log, copied)
//! mcp-confirm-audit inspect --dir DIR --key VKEY --secret-file FILE [--view FILE] [--witness DIR]...
//! mcp-confirm-audit adopt-legacy --dir DIR --key VKEY --secret-file FILE [--view FILE] (--seen FILE | --witness DIR)...
//! ```
//!
//! `verify` says "sound" only relative to a checkpoint kept elsewhere (`--seen`, or the newest a
//! `--witness` directory holds): against itself alone a log can be consistent and still be an
//! older copy, or another log signed with the same key. Without one it says what it could not
//! rule out and exits 3; so it does when records no checkpoint signs follow the newest one.
//!
//! `inspect` is for the operator whose server refused to open its log: with the signing seed
//! (`--secret-file`, 64 hex digits) it also checks every record's tag and the signer's view, and
//! lists everything that differs from what the writer wrote. `adopt-legacy` writes a view for a
//! log written before views existed (an upgrade), only if nothing else differs.
//!
//! `pull` copies a log kept in PostgreSQL into a new directory byte for byte, judging nothing:
//! then verify the directory like any other.
//!
//! `VKEY` is the log's verifier key text (`<name>+<id>+<key>`), as the server prints it. Exit
//! status: 0 when everything holds, 1 when a fault was found (each is printed), 2 on a usage or
//! read error, 3 when `verify` found no fault but could not vouch for everything: no checkpoint
//! from elsewhere to anchor it, or records newer than the newest checkpoint that none signs.

use std::path::PathBuf;
use std::process::ExitCode;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use mcp_confirm_log::{DirWitness, Finding, LogKey, Record, VerifierKey, merkle, verify};
use serde_json::{Value, json};

const USAGE: &str = "usage:
  mcp-confirm-audit verify --dir DIR --key VKEY [--seen CHECKPOINT_FILE]... [--witness DIR]...
  mcp-confirm-audit prove --dir DIR --key VKEY --seq N
  mcp-confirm-audit prove --dir DIR --key VKEY --from CHECKPOINT_FILE
  mcp-confirm-audit check-proof --key VKEY --proof FILE
  mcp-confirm-audit show --dir DIR [--key VKEY] [--event E] [--tool T] [--chosen ID] [--subject S]
  mcp-confirm-audit export --dir DIR
  mcp-confirm-audit pull --postgres URL [--table T] --dir DIR
  mcp-confirm-audit inspect --dir DIR --key VKEY --secret-file FILE [--view FILE] [--witness DIR]...
  mcp-confirm-audit adopt-legacy --dir DIR --key VKEY --secret-file FILE [--view FILE] (--seen FILE | --witness DIR)...";

#[derive(Default)]
struct Args {
    dir: Option<PathBuf>,
    key: Option<String>,
    seen: Vec<PathBuf>,
    seq: Option<u64>,
    proof: Option<PathBuf>,
    event: Option<String>,
    tool: Option<String>,
    chosen: Option<String>,
    subject: Option<String>,
    postgres: Option<String>,
    table: Option<String>,
    from: Option<PathBuf>,
    witness: Vec<PathBuf>,
    secret_file: Option<PathBuf>,
    view: Option<PathBuf>,
}

/// What `run` found: everything holds, a fault, or no fault but something not vouched for
/// (nothing to anchor it, or records no checkpoint signs).
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Holds,
    Fault,
    Unanchored,
}

impl From<bool> for Outcome {
    fn from(holds: bool) -> Self {
        if holds { Self::Holds } else { Self::Fault }
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(Outcome::Holds) => ExitCode::SUCCESS,
        Ok(Outcome::Fault) => ExitCode::from(1),
        Ok(Outcome::Unanchored) => ExitCode::from(3),
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<Outcome, String> {
    let mut argv = std::env::args().skip(1);
    let command = argv.next().ok_or(USAGE)?;
    let mut args = Args::default();
    while let Some(flag) = argv.next() {
        let mut value = || {
            argv.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--dir" => args.dir = Some(value()?.into()),
            "--key" => args.key = Some(value()?),
            "--seen" => args.seen.push(value()?.into()),
            "--seq" => args.seq = Some(value()?.parse().map_err(|e| format!("--seq: {e}"))?),
            "--proof" => args.proof = Some(value()?.into()),
            "--event" => args.event = Some(value()?),
            "--tool" => args.tool = Some(value()?),
            "--chosen" => args.chosen = Some(value()?),
            "--subject" => args.subject = Some(value()?),
            "--postgres" => args.postgres = Some(value()?),
            "--table" => args.table = Some(value()?),
            "--from" => args.from = Some(value()?.into()),
            "--witness" => args.witness.push(value()?.into()),
            "--secret-file" => args.secret_file = Some(value()?.into()),
            "--view" => args.view = Some(value()?.into()),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    match command.as_str() {
        "verify" => verify_log(&args),
        "prove" => prove(&args).map(Outcome::from),
        "check-proof" => check_proof(&args).map(Outcome::from),
        "show" => show(&args, true).map(Outcome::from),
        "export" => show(&args, false).map(Outcome::from),
        "pull" => pull(&args).map(Outcome::from),
        "inspect" => inspect(&args).map(Outcome::from),
        "adopt-legacy" => adopt_legacy(&args).map(Outcome::from),
        other => Err(format!("unknown command {other}\n{USAGE}")),
    }
}

fn dir(args: &Args) -> Result<&PathBuf, String> {
    args.dir
        .as_ref()
        .ok_or_else(|| format!("--dir is required\n{USAGE}"))
}

fn key(args: &Args) -> Result<VerifierKey, String> {
    args.key
        .as_deref()
        .ok_or_else(|| format!("--key is required\n{USAGE}"))?
        .parse()
        .map_err(|e| format!("--key: {e}"))
}

/// The checkpoints given from elsewhere: `--seen` files and the newest each `--witness` holds.
fn kept_elsewhere(args: &Args, key: &VerifierKey) -> Result<Vec<String>, String> {
    let read =
        |p: &PathBuf| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut seen = args.seen.iter().map(read).collect::<Result<Vec<_>, _>>()?;
    for dir in &args.witness {
        let witness = DirWitness::new(dir, key.clone()).map_err(|e| e.to_string())?;
        match std::fs::read_to_string(witness.path(key.name())) {
            Ok(text) => seen.push(text),
            Err(e) => {
                return Err(format!(
                    "the witness {} holds no checkpoint of {}: {e}",
                    dir.display(),
                    key.name()
                ));
            }
        }
    }
    Ok(seen)
}

/// The checkpoints kept elsewhere, opened: each must be signed by `verifier`.
fn kept_checkpoints(
    args: &Args,
    verifier: &VerifierKey,
) -> Result<Vec<mcp_confirm_log::SignedCheckpoint>, String> {
    kept_elsewhere(args, verifier)?
        .iter()
        .map(|text| {
            verifier
                .open(text)
                .map_err(|e| format!("a checkpoint kept elsewhere: {e}"))
        })
        .collect()
}

fn verify_log(args: &Args) -> Result<Outcome, String> {
    let key = key(args)?;
    let seen = kept_elsewhere(args, &key)?;
    let verified = verify(dir(args)?, &key, &seen).map_err(|e| e.to_string())?;
    for finding in &verified.findings {
        match finding {
            Finding::Unsigned { .. } | Finding::TornTail { .. } => println!("UNSIGNED  {finding}"),
            _ => println!("FAULT  {finding}"),
        }
    }
    let latest = verified.latest().map_or("no checkpoint".to_owned(), |c| {
        format!(
            "newest checkpoint: {} records, root {}",
            c.size,
            STANDARD.encode(c.root)
        )
    });
    let (verdict, outcome) = verdict(&verified);
    println!(
        "{} records, {} checkpoints signed by {}; {latest}; {verdict}",
        verified.records.len(),
        verified.checkpoints.len(),
        key.name(),
    );
    Ok(outcome)
}

/// What `verify` concludes, and its exit status: records that no checkpoint signs are vouched
/// for by nothing, so a log that has any is not "everything holds" (exit 3, as an unanchored
/// one), even where each checkpoint verifies.
fn verdict(verified: &mcp_confirm_log::Verified) -> (String, Outcome) {
    let (verdict, outcome) = match (verified.is_sound(), verified.anchored) {
        (false, _) => ("NOT sound".to_owned(), Outcome::Fault),
        (true, Some(size)) => (
            format!("sound relative to the checkpoint of {size} records kept elsewhere"),
            Outcome::Holds,
        ),
        (true, None) => (
            "consistent in itself, NOT checked against a checkpoint kept elsewhere: a rollback of \
             the whole log, or a log replaced by another signed with the same key, cannot be ruled \
             out (give --seen FILE or --witness DIR)"
                .to_owned(),
            Outcome::Unanchored,
        ),
    };
    let unsigned: u64 = verified
        .findings
        .iter()
        .map(|f| match f {
            Finding::Unsigned { from, to } => to - from,
            _ => 0,
        })
        .sum();
    if unsigned > 0 && verified.is_sound() {
        let verdict = format!(
            "{verdict}; {unsigned} newer records are signed by no checkpoint and vouched for by \
             nothing (the writer signs them at its next checkpoint; a log its writer no longer \
             signs needs `inspect`)"
        );
        return (verdict, Outcome::Unanchored);
    }
    (verdict, outcome)
}

/// The signing key, from `--secret-file` (64 hex digits) under the name `--key` gives.
fn signing_key(args: &Args) -> Result<LogKey, String> {
    let name = key(args)?.name().to_owned();
    let path = args
        .secret_file
        .as_ref()
        .ok_or_else(|| format!("--secret-file is required\n{USAGE}"))?;
    let text = zeroize::Zeroizing::new(
        std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
    );
    let text = text.trim();
    let mut seed = zeroize::Zeroizing::new([0u8; 32]);
    if text.len() != 64 {
        return Err(format!("{}: not 64 hex digits", path.display()));
    }
    for (i, byte) in seed.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("{}: not 64 hex digits", path.display()))?;
    }
    let signing = LogKey::from_seed(&name, *seed).map_err(|e| e.to_string())?;
    if signing.verifier() != key(args)? {
        return Err("the secret is not the key --key names".into());
    }
    Ok(signing)
}

fn inspect(args: &Args) -> Result<bool, String> {
    let signing = signing_key(args)?;
    let must_extend = kept_checkpoints(args, &signing.verifier())?;
    let problems =
        mcp_confirm_log::file::inspect(dir(args)?, args.view.as_deref(), &signing, &must_extend)
            .map_err(|e| e.to_string())?;
    for problem in &problems {
        println!("DIFFERS  {problem}");
    }
    if problems.is_empty() {
        println!(
            "the log is as its writer left it (tags, view, checkpoints{})",
            if must_extend.is_empty() {
                ""
            } else {
                ", witnesses"
            }
        );
    } else {
        println!(
            "{} differences: keep this directory as evidence; start a new log in another directory",
            problems.len()
        );
    }
    Ok(problems.is_empty())
}

fn adopt_legacy(args: &Args) -> Result<bool, String> {
    let signing = signing_key(args)?;
    let kept = kept_checkpoints(args, &signing.verifier())?;
    if kept.is_empty() {
        return Err(format!(
            "adopt-legacy trusts the log as it is: give a checkpoint kept elsewhere it must extend (--seen FILE or --witness DIR)\n{USAGE}"
        ));
    }
    let size =
        mcp_confirm_log::file::adopt_legacy(dir(args)?, args.view.as_deref(), &signing, &kept)
            .map_err(|e| e.to_string())?;
    println!(
        "wrote a signer's view of {size} records; the writer checks the log against it from now on"
    );
    Ok(true)
}

fn prove(args: &Args) -> Result<bool, String> {
    if args.from.is_some() {
        return prove_consistency(args);
    }
    let key = key(args)?;
    let seq = args
        .seq
        .ok_or_else(|| format!("--seq is required\n{USAGE}"))?;
    let verified = verify(dir(args)?, &key, &[]).map_err(|e| e.to_string())?;
    if !verified.is_sound() {
        return Err("the log is not sound; run verify".into());
    }
    let signed = verified
        .checkpoints
        .last()
        .ok_or("no checkpoint yet: nothing to prove against")?;
    let size = usize::try_from(signed.checkpoint.size).map_err(|e| e.to_string())?;
    let index = usize::try_from(seq).map_err(|e| e.to_string())?;
    let proof = merkle::inclusion_proof(&verified.leaves[..size], index)
        .ok_or_else(|| format!("record {seq} is not in the newest checkpoint ({size} records)"))?;
    let record = &verified.records[index];
    println!(
        "{}",
        json!({
            "record": record.to_line(),
            "index": seq,
            "size": size,
            "proof": proof.iter().map(|h| STANDARD.encode(h)).collect::<Vec<_>>(),
            "checkpoint": signed.text,
        })
    );
    Ok(true)
}

/// A consistency proof from the checkpoint in `--from` (one kept from earlier) to the newest.
fn prove_consistency(args: &Args) -> Result<bool, String> {
    let key = key(args)?;
    let path = args.from.as_ref().ok_or(USAGE)?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let old = key
        .open(&text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let verified =
        verify(dir(args)?, &key, std::slice::from_ref(&text)).map_err(|e| e.to_string())?;
    if !verified.is_sound() {
        return Err(
            "the log is not sound, or contradicts that checkpoint; run verify --seen".into(),
        );
    }
    let new = verified
        .checkpoints
        .last()
        .ok_or("no checkpoint yet: nothing to prove against")?;
    let size = usize::try_from(new.checkpoint.size).map_err(|e| e.to_string())?;
    let old_size = usize::try_from(old.checkpoint.size).map_err(|e| e.to_string())?;
    let proof = merkle::consistency_proof(&verified.leaves[..size], old_size).ok_or_else(|| {
        format!("the checkpoint of {old_size} records is not older than the newest ({size})")
    })?;
    println!(
        "{}",
        json!({
            "old": old.text,
            "new": new.text,
            "proof": proof.iter().map(|h| STANDARD.encode(h)).collect::<Vec<_>>(),
        })
    );
    Ok(true)
}

fn check_consistency(key: &VerifierKey, proof: &Value) -> Result<bool, String> {
    let open = |name: &str| {
        key.open(
            proof
                .get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("the proof has no {name} checkpoint"))?,
        )
        .map_err(|e| format!("{name} checkpoint: {e}"))
    };
    let (old, new) = (open("old")?, open("new")?);
    let hashes = hashes(proof)?;
    let holds = merkle::verify_consistency(
        old.checkpoint.size,
        new.checkpoint.size,
        &old.checkpoint.root,
        &new.checkpoint.root,
        &hashes,
    );
    println!(
        "the checkpoint of {} records {} a prefix of the checkpoint of {} records signed by {}",
        old.checkpoint.size,
        if holds { "IS" } else { "is NOT" },
        new.checkpoint.size,
        key.name()
    );
    Ok(holds)
}

fn hashes(proof: &Value) -> Result<Vec<[u8; 32]>, String> {
    proof
        .get("proof")
        .and_then(Value::as_array)
        .ok_or("the proof has no list of hashes")?
        .iter()
        .map(|h| {
            h.as_str()
                .and_then(|h| STANDARD.decode(h).ok())
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .ok_or_else(|| "a proof hash is not 32 bytes of base64".to_owned())
        })
        .collect()
}

fn check_proof(args: &Args) -> Result<bool, String> {
    let key = key(args)?;
    let path = args
        .proof
        .as_ref()
        .ok_or_else(|| format!("--proof is required\n{USAGE}"))?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let proof: Value = serde_json::from_str(&text).map_err(|e| format!("not a proof: {e}"))?;
    if proof.get("old").is_some() {
        return check_consistency(&key, &proof);
    }
    let field = |name: &str| {
        proof
            .get(name)
            .ok_or_else(|| format!("the proof has no {name}"))
    };
    let signed = key
        .open(
            field("checkpoint")?
                .as_str()
                .ok_or("checkpoint is not text")?,
        )
        .map_err(|e| format!("checkpoint: {e}"))?;
    let line = field("record")?.as_str().ok_or("record is not text")?;
    let record = Record::from_line(line).ok_or("the record is not canonical")?;
    let index = field("index")?.as_u64().ok_or("index is not a number")?;
    let hashes = hashes(&proof)?;
    let holds = record.seq == index
        && merkle::verify_inclusion(
            index,
            signed.checkpoint.size,
            &merkle::leaf_hash(line.as_bytes()),
            &hashes,
            &signed.checkpoint.root,
        );
    println!(
        "record {index} {} in the checkpoint of {} records signed by {}",
        if holds { "IS" } else { "is NOT" },
        signed.checkpoint.size,
        key.name()
    );
    Ok(holds)
}

fn show(args: &Args, filtered: bool) -> Result<bool, String> {
    let path = dir(args)?.join(mcp_confirm_log::file::RECORDS);
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    // Which records a checkpoint vouches for: lines past the newest that verifies are marked,
    // by their place in the file (not by the number a line claims).
    let signed = match args.key {
        Some(_) => {
            let verified = verify(dir(args)?, &key(args)?, &[]).map_err(|e| e.to_string())?;
            Some(verified.latest().map_or(0, |c| c.size))
        }
        None => {
            eprintln!("no --key: which records a checkpoint signed was not checked");
            None
        }
    };
    let wanted = |field: &Option<String>, value: Option<&str>| {
        field.as_deref().is_none_or(|want| value == Some(want))
    };
    let mut rest = bytes.as_slice();
    let mut index = 0u64;
    while !rest.is_empty() {
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            eprintln!(
                "TORN line {index}: cut short (no newline), not a record and signed by nothing"
            );
            break;
        };
        let line = &rest[..end];
        rest = &rest[end + 1..];
        let at = index;
        index += 1;
        let Some((text, record)) = std::str::from_utf8(line)
            .ok()
            .and_then(|text| Record::from_line(text).map(|record| (text, record)))
        else {
            eprintln!("skipped line {at}: not a record (run verify)");
            continue;
        };
        let shown = !filtered
            || (wanted(&args.event, Some(&record.event))
                && wanted(&args.tool, record.tool.as_deref())
                && wanted(&args.chosen, record.chosen.as_deref())
                && wanted(&args.subject, record.subject.as_deref()));
        if shown {
            if signed.is_some_and(|size| at >= size) {
                println!("UNSIGNED {text}");
            } else {
                println!("{text}");
            }
        }
    }
    Ok(true)
}

#[cfg(not(feature = "postgres"))]
fn pull(_: &Args) -> Result<bool, String> {
    Err("this mcp-confirm-audit was built without PostgreSQL support (feature `postgres` of mcp-confirm-log)".to_owned())
}

#[cfg(feature = "postgres")]
fn pull(args: &Args) -> Result<bool, String> {
    let url = args
        .postgres
        .as_deref()
        .ok_or_else(|| format!("--postgres is required\n{USAGE}"))?;
    let table = args
        .table
        .as_deref()
        .unwrap_or(mcp_confirm_log::PostgresLog::DEFAULT_TABLE);
    let dir = dir(args)?;
    let copied = mcp_confirm_log::postgres::export(url, table, dir).map_err(|e| e.to_string())?;
    println!(
        "copied {copied} records and the checkpoints of {table} into {}; now verify it",
        dir.display()
    );
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verified(findings: Vec<Finding>, anchored: Option<u64>) -> mcp_confirm_log::Verified {
        mcp_confirm_log::Verified {
            records: Vec::new(),
            leaves: Vec::new(),
            checkpoints: Vec::new(),
            findings,
            anchored,
        }
    }

    /// `verify` exited 0 while it printed records no checkpoint signed (#52, 10c).
    #[test]
    fn records_no_checkpoint_signs_are_not_everything_holding() {
        assert_eq!(verdict(&verified(vec![], Some(5))).1, Outcome::Holds);
        let (text, outcome) = verdict(&verified(
            vec![Finding::Unsigned { from: 5, to: 7 }],
            Some(5),
        ));
        assert_eq!(outcome, Outcome::Unanchored);
        assert!(
            text.contains("2 newer records are signed by no checkpoint"),
            "{text}"
        );
        assert_eq!(
            verdict(&verified(vec![Finding::Unsigned { from: 5, to: 7 }], None)).1,
            Outcome::Unanchored
        );
        assert_eq!(verdict(&verified(vec![], None)).1, Outcome::Unanchored);
    }
}
