//! The decision log (issue 22): records, checkpoints, recovery, and the attacks the offline
//! verifier must name: an edited, deleted or reordered record, a cut tail, an old checkpoint
//! replayed, a fork, a checkpoint forged with another key, a crash mid-append, a full disk.

mod crash;
mod insider;
mod interop;
mod layer;
mod postgres;

use std::fs;
use std::path::{Path, PathBuf};

use mcp_confirm_log::file::{CHECKPOINTS, RECORDS, checkpoint_path};
use mcp_confirm_log::{
    CheckpointError, FileLog, Finding, Fsync, LogError, LogKey, Record, VerifierKey, merkle, verify,
};

const ORIGIN: &str = "notes.example/decisions";

fn key() -> LogKey {
    LogKey::from_seed(ORIGIN, [0x42; 32]).unwrap()
}

/// A fresh directory under the target's temporary folder.
fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "mcp-confirm-log-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let _ = fs::remove_dir_all(&dir);
    dir
}

fn decision(i: u64) -> Record {
    let mut record = Record::new(if i.is_multiple_of(2) {
        "challenged"
    } else {
        "accepted"
    });
    record.at_ms = 1_800_000_000_000 + i;
    record.audience = "notes.example".into();
    record.tool = Some("notes_delete".into());
    record.chosen = Some(format!("note-{i}"));
    record.version = Some(format!("v{i}"));
    record
}

/// A log of `n` records with a checkpoint after every `every`, and one at the end.
fn written(name: &str, n: u64, every: u64) -> PathBuf {
    let dir = fresh_dir(name);
    let mut log = FileLog::open(&dir, key(), Fsync::Never).unwrap();
    for i in 0..n {
        log.append(&mut [decision(i)]).unwrap();
        if (i + 1) % every == 0 {
            log.checkpoint().unwrap();
        }
    }
    log.checkpoint().unwrap();
    dir
}

fn verifier() -> VerifierKey {
    key().verifier()
}

fn lines(dir: &Path) -> Vec<String> {
    fs::read_to_string(dir.join(RECORDS))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(dir: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    fs::write(dir.join(RECORDS), text).unwrap();
}

fn findings(dir: &Path, seen: &[String]) -> Vec<Finding> {
    verify(dir, &verifier(), seen).unwrap().findings
}

fn latest_text(dir: &Path) -> String {
    let mut names: Vec<_> = fs::read_dir(dir.join(CHECKPOINTS))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    fs::read_to_string(names.last().unwrap()).unwrap()
}

#[test]
fn a_sound_log_verifies_with_every_checkpoint_and_proof() {
    let dir = written("sound", 25, 10);
    let verified = verify(&dir, &verifier(), &[]).unwrap();
    assert!(verified.is_sound(), "{:?}", verified.findings);
    assert_eq!(verified.records.len(), 25);
    let sizes: Vec<u64> = verified
        .checkpoints
        .iter()
        .map(|c| c.checkpoint.size)
        .collect();
    assert_eq!(sizes, [10, 20, 25]);
    let latest = verified.latest().unwrap().clone();
    // Inclusion of every record in the latest checkpoint, and consistency of the older ones.
    for (i, leaf) in verified.leaves.iter().enumerate() {
        let proof = merkle::inclusion_proof(&verified.leaves, i).unwrap();
        assert!(merkle::verify_inclusion(
            i as u64,
            25,
            leaf,
            &proof,
            &latest.root
        ));
    }
    for old in &verified.checkpoints {
        let proof =
            merkle::consistency_proof(&verified.leaves, old.checkpoint.size as usize).unwrap();
        assert!(merkle::verify_consistency(
            old.checkpoint.size,
            25,
            &old.checkpoint.root,
            &latest.root,
            &proof
        ));
    }
}

#[test]
fn an_edited_middle_record_is_named() {
    let dir = written("edit", 25, 10);
    let mut all = lines(&dir);
    // Canonical, plausible, and wrong: the record of note-12 now says note-99.
    all[12] = all[12].replace("note-12", "note-99");
    write_lines(&dir, &all);
    let found = findings(&dir, &[]);
    assert!(
        found.contains(&Finding::RootMismatch {
            checkpoint: 2,
            size: 20
        }),
        "{found:?}"
    );
    assert!(
        found.contains(&Finding::RootMismatch {
            checkpoint: 3,
            size: 25
        }),
        "{found:?}"
    );
    assert!(
        !found
            .iter()
            .any(|f| matches!(f, Finding::RootMismatch { size: 10, .. }))
    );
    // An edit that is not canonical is named by its line too.
    all[3] = all[3].replace(',', ", ");
    write_lines(&dir, &all);
    assert!(findings(&dir, &[]).contains(&Finding::Unreadable { line: 3 }));
}

#[test]
fn a_deleted_record_is_named() {
    let dir = written("delete", 25, 10);
    let mut all = lines(&dir);
    all.remove(7);
    write_lines(&dir, &all);
    let found = findings(&dir, &[]);
    assert!(
        found.contains(&Finding::OutOfSequence { line: 7, seq: 8 }),
        "{found:?}"
    );
    assert!(found.contains(&Finding::Truncated {
        checkpoint: 3,
        signed: 25,
        present: 24
    }));
}

#[test]
fn two_reordered_records_are_named() {
    let dir = written("reorder", 25, 10);
    let mut all = lines(&dir);
    all.swap(4, 5);
    write_lines(&dir, &all);
    let found = findings(&dir, &[]);
    assert!(
        found.contains(&Finding::OutOfSequence { line: 4, seq: 5 }),
        "{found:?}"
    );
    assert!(
        found.contains(&Finding::OutOfSequence { line: 5, seq: 4 }),
        "{found:?}"
    );
}

#[test]
fn a_cut_tail_is_named() {
    let dir = written("truncate", 25, 10);
    let all = lines(&dir);
    write_lines(&dir, &all[..22]);
    assert!(findings(&dir, &[]).contains(&Finding::Truncated {
        checkpoint: 3,
        signed: 25,
        present: 22
    }));
}

#[test]
fn an_old_checkpoint_replayed_as_the_latest_is_named() {
    let dir = written("rollback", 25, 10);
    // An auditor kept the newest checkpoint; the operator then rolls the log back to 20
    // records and its checkpoint of 20.
    let seen = latest_text(&dir);
    fs::remove_file(checkpoint_path(&dir, 3)).unwrap();
    let all = lines(&dir);
    write_lines(&dir, &all[..20]);
    assert!(findings(&dir, &[]).is_empty(), "alone it looks whole");
    let found = findings(&dir, &[seen]);
    assert!(
        found.contains(&Finding::Rollback {
            seen: 25,
            latest: 20
        }),
        "{found:?}"
    );
}

#[test]
fn a_fork_under_the_same_key_is_named() {
    let dir = written("fork-a", 25, 10);
    // The same key signs another history of the same length.
    let other = fresh_dir("fork-b");
    let mut log = FileLog::open(&other, key(), Fsync::Never).unwrap();
    for i in 0..25 {
        let mut record = decision(i);
        if i == 17 {
            record.chosen = Some("note-elsewhere".into());
        }
        log.append(&mut [record]).unwrap();
    }
    let forked = log.checkpoint().unwrap().unwrap().text;
    let found = findings(&dir, &[forked]);
    assert!(found.contains(&Finding::Fork { size: 25 }), "{found:?}");
}

#[test]
fn a_checkpoint_forged_with_another_key_is_named() {
    let dir = written("forged", 25, 10);
    let forger = LogKey::from_seed(ORIGIN, [0x66; 32]).unwrap();
    let root = merkle::root(&verify(&dir, &verifier(), &[]).unwrap().leaves);
    fs::write(checkpoint_path(&dir, 4), forger.sign(25, &root).text).unwrap();
    let found = findings(&dir, &[]);
    assert!(
        found.iter().any(|f| matches!(
            f,
            Finding::BadCheckpoint {
                checkpoint: 4,
                error: CheckpointError::NotSignedBy(_)
            }
        )),
        "{found:?}"
    );
    // And the writer refuses to go on from it.
    assert!(matches!(
        FileLog::open(&dir, key(), Fsync::Never),
        Err(LogError::Damaged(_))
    ));
}

#[test]
fn the_writer_never_signs_over_a_changed_prefix() {
    let dir = written("no-fork", 25, 10);
    let mut all = lines(&dir);
    all[2] = all[2].replace("note-2", "note-22");
    write_lines(&dir, &all);
    assert!(matches!(
        FileLog::open(&dir, key(), Fsync::Never),
        Err(LogError::Damaged(_))
    ));
    // Cut below what was signed: refused too.
    write_lines(&dir, &lines(&written("no-fork-2", 25, 10))[..24]);
    assert!(matches!(
        FileLog::open(&dir, key(), Fsync::Never),
        Err(LogError::Damaged(_))
    ));
}

#[test]
fn a_torn_append_is_moved_aside_and_the_log_goes_on() {
    let dir = written("torn", 12, 10);
    let mut text = fs::read_to_string(dir.join(RECORDS)).unwrap();
    text.push_str("{\"at_ms\":18000000000");
    fs::write(dir.join(RECORDS), &text).unwrap();
    assert_eq!(findings(&dir, &[]), [Finding::TornTail { line: 12 }]);
    let mut log = FileLog::open(&dir, key(), Fsync::Never).unwrap();
    assert_eq!(log.size(), 12);
    assert!(dir.join(format!("{RECORDS}.cut-1")).exists());
    log.append(&mut [decision(12)]).unwrap();
    log.checkpoint().unwrap();
    let verified = verify(&dir, &verifier(), &[]).unwrap();
    assert!(verified.is_sound(), "{:?}", verified.findings);
    assert_eq!(verified.records.len(), 13);
}

#[test]
fn one_writer_per_directory() {
    let dir = fresh_dir("lock");
    let first = FileLog::open(&dir, key(), Fsync::Never).unwrap();
    assert!(matches!(
        FileLog::open(&dir, key(), Fsync::Never),
        Err(LogError::Locked)
    ));
    drop(first);
    FileLog::open(&dir, key(), Fsync::Never).expect("free again once the first is closed");
}
