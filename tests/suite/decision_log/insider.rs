//! An insider with write access to the log's storage (not its key) tries to have the writer
//! sign a history they changed (issue 33): a record appended while the server is stopped, an
//! edit made signable by deleting the newest checkpoint, records cut with their checkpoint, a
//! whole directory rolled back, the view forged or removed. Each is a stop with a clear error,
//! never a new signature; `inspect` names it.

use std::fs;
use std::path::Path;

use mcp_confirm_log::file::{self, CHECKPOINTS, RECORDS, VIEW, checkpoint_path};
use mcp_confirm_log::{DirWitness, FileLog, FileOptions, Finding, Fsync, LogError, Record, verify};

use super::{decision, fresh_dir, key, lines, write_lines};

/// A log of `n` records, checkpoints after `first` and at `n`, closed cleanly.
fn two_checkpoints(name: &str, first: u64, n: u64) -> std::path::PathBuf {
    let dir = fresh_dir(name);
    let mut log = FileLog::open(&dir, key(), Fsync::Never).unwrap();
    for i in 0..n {
        log.append(&mut [subject(decision(i), "alice")]).unwrap();
        if i + 1 == first {
            log.checkpoint().unwrap();
        }
    }
    log.checkpoint().unwrap();
    dir
}

fn subject(mut record: Record, who: &str) -> Record {
    record.subject = Some(who.into());
    record
}

/// Opening fails as damaged, and the error says `what`.
fn refused(dir: &Path, options: FileOptions, what: &str) {
    match FileLog::open_with(dir, key(), options) {
        Err(LogError::Damaged(why)) => assert!(why.contains(what), "{why}"),
        Err(other) => panic!("expected a stop for {what:?}, got {other}"),
        Ok(log) => panic!(
            "the writer opened a log it did not write ({what}); size {}",
            log.size()
        ),
    }
}

fn checkpoint_count(dir: &Path) -> usize {
    fs::read_dir(dir.join(CHECKPOINTS)).unwrap().count()
}

#[test]
fn a_record_appended_while_the_server_is_stopped_is_a_stop_not_a_signature() {
    let dir = two_checkpoints("insider-append", 3, 6);
    let before = checkpoint_count(&dir);
    let mut forged = subject(decision(6), "bob");
    forged.event = "accepted".into();
    forged.seq = 6;
    forged.instance = "notes-1".into();
    let mut all = lines(&dir);
    all.push(forged.to_line());
    write_lines(&dir, &all);
    refused(&dir, FileOptions::default(), "record 6 carries no tag");
    // The stop says how to look, in a command that runs as written: `inspect` needs the
    // verifier key and the seed (#52, 10d).
    let verifier = key().verifier().to_string();
    refused(
        &dir,
        FileOptions::default(),
        &format!(
            "inspect --dir {} --key '{verifier}' --secret-file",
            dir.display()
        ),
    );
    // With a made-up tag it is no better.
    forged.tag = Some("00112233445566778899aabbccddeeff".into());
    all.pop();
    all.push(forged.to_line());
    write_lines(&dir, &all);
    refused(
        &dir,
        FileOptions::default(),
        "record 6 does not carry its writer's tag",
    );
    assert_eq!(checkpoint_count(&dir), before, "nothing was signed");
    let problems = file::inspect(&dir, None, &key(), &[]).unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    // The offline verifier, which has only the public key, says the record is not signed.
    let verified = verify(&dir, &key().verifier(), &[]).unwrap();
    assert!(
        verified
            .findings
            .iter()
            .any(|f| matches!(f, Finding::Unsigned { from: 6, to: 7 })),
        "{:?}",
        verified.findings
    );
}

#[test]
fn deleting_the_newest_checkpoint_does_not_make_an_edit_signable() {
    let dir = two_checkpoints("insider-edit", 3, 6);
    // Record 4 is covered only by the newest checkpoint (2): edit it, delete that checkpoint.
    let mut all = lines(&dir);
    all[4] = all[4].replace("\"subject\":\"alice\"", "\"subject\":\"mallory\"");
    write_lines(&dir, &all);
    fs::remove_file(checkpoint_path(&dir, 2)).unwrap();
    refused(
        &dir,
        FileOptions::default(),
        "record 4 does not carry its writer's tag",
    );
    // Without the edit, the missing checkpoint alone is a stop too.
    let dir = two_checkpoints("insider-delete-checkpoint", 3, 6);
    fs::remove_file(checkpoint_path(&dir, 2)).unwrap();
    refused(
        &dir,
        FileOptions::default(),
        "checkpoint 2 that the writer signed is missing",
    );
    // So are records cut back to the older checkpoint along with it.
    let dir = two_checkpoints("insider-cut", 3, 6);
    fs::remove_file(checkpoint_path(&dir, 2)).unwrap();
    write_lines(&dir, &lines(&dir)[..3]);
    refused(&dir, FileOptions::default(), "records were removed");
    // And so is removing the view that says so.
    fs::remove_file(dir.join(VIEW)).unwrap();
    refused(&dir, FileOptions::default(), "view");
    // A view forged to match is not the writer's.
    let dir = two_checkpoints("insider-forged-view", 3, 6);
    let view = fs::read_to_string(dir.join(VIEW)).unwrap();
    fs::write(dir.join(VIEW), view.replace("size 6", "size 3")).unwrap();
    refused(
        &dir,
        FileOptions::default(),
        "not written by this log's key",
    );
}

#[test]
fn a_whole_directory_rolled_back_is_caught_by_a_witness() {
    let dir = fresh_dir("insider-rollback");
    let witness_dir = fresh_dir("insider-rollback-witness");
    let saved = fresh_dir("insider-rollback-saved");
    let witnessed = || {
        FileOptions::default()
            .fsync(Fsync::Never)
            .witness(DirWitness::new(&witness_dir, key().verifier()).unwrap())
    };
    let mut log = FileLog::open_with(&dir, key(), witnessed()).unwrap();
    for i in 0..3 {
        log.append(&mut [decision(i)]).unwrap();
    }
    log.checkpoint().unwrap();
    drop(log);
    // The insider keeps a copy of the whole directory (records, checkpoints, view)…
    copy_dir(&dir, &saved);
    let mut log = FileLog::open_with(&dir, key(), witnessed()).unwrap();
    for i in 3..6 {
        log.append(&mut [subject(decision(i), "alice")]).unwrap();
    }
    log.checkpoint().unwrap();
    drop(log);
    // …and after the incident puts it back: consistent in itself, so without a witness the
    // writer cannot tell…
    fs::remove_dir_all(&dir).unwrap();
    copy_dir(&saved, &dir);
    let alone = FileLog::open(&dir, key(), Fsync::Never);
    assert!(
        alone.is_ok(),
        "a consistent older log opens without a witness"
    );
    drop(alone);
    fs::remove_dir_all(&dir).unwrap();
    copy_dir(&saved, &dir);
    // …but the witness holds the checkpoint of 6.
    refused(&dir, witnessed(), "a witness holds a checkpoint of 6");
    // The offline verifier, given the witness, says the same.
    let witness_text = fs::read_to_string(
        DirWitness::new(&witness_dir, key().verifier())
            .unwrap()
            .path(super::ORIGIN),
    )
    .unwrap();
    let verified = verify(&dir, &key().verifier(), &[witness_text]).unwrap();
    assert!(
        verified.findings.iter().any(|f| matches!(
            f,
            Finding::Rollback { seen: 6, .. } | Finding::Truncated { .. }
        )),
        "{:?}",
        verified.findings
    );
}

#[test]
fn a_witness_refuses_a_fork_and_the_writer_stops() {
    let dir = fresh_dir("insider-fork");
    let witness_dir = fresh_dir("insider-fork-witness");
    let witnessed = || {
        FileOptions::default()
            .fsync(Fsync::Never)
            .witness(DirWitness::new(&witness_dir, key().verifier()).unwrap())
    };
    let mut log = FileLog::open_with(&dir, key(), witnessed()).unwrap();
    for i in 0..4 {
        log.append(&mut [decision(i)]).unwrap();
    }
    log.checkpoint().unwrap();
    drop(log);
    // Another log under the same name and key (a second directory, a copy started elsewhere)
    // writes other records: the witness will not take its checkpoint.
    let other = fresh_dir("insider-fork-other");
    let mut fork =
        FileLog::open_with(&other, key(), FileOptions::default().fsync(Fsync::Never)).unwrap();
    for i in 10..16 {
        fork.append(&mut [decision(i)]).unwrap();
    }
    drop(fork);
    refused(&other, witnessed(), "a witness's checkpoint");
}

#[test]
fn records_past_the_last_checkpoint_survive_a_crash_when_they_are_the_writers() {
    // A crash after a write and before a checkpoint leaves tagged, unsigned records: they are
    // the writer's own, so the log opens and signs them; a torn last line is moved aside.
    let dir = fresh_dir("insider-crash");
    let mut log = FileLog::open(&dir, key(), Fsync::Never).unwrap();
    for i in 0..3 {
        log.append(&mut [decision(i)]).unwrap();
    }
    log.checkpoint().unwrap();
    for i in 3..5 {
        log.append(&mut [decision(i)]).unwrap();
    }
    drop(log);
    let mut bytes = fs::read(dir.join(RECORDS)).unwrap();
    bytes.extend_from_slice(b"{\"at_ms\":1,\"audi");
    fs::write(dir.join(RECORDS), bytes).unwrap();
    let mut log = FileLog::open(&dir, key(), Fsync::Never).unwrap();
    assert_eq!(log.size(), 5);
    assert_eq!(log.checkpoint().unwrap().unwrap().checkpoint.size, 5);
    assert!(dir.join(format!("{RECORDS}.cut-1")).exists());
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A second log under the same name and key, started beside the first (a copy of the server
/// on another machine): the witness holds the first's checkpoints, so the second's are refused
/// at runtime, and its writer stays down instead of signing on.
#[test]
fn a_second_log_under_one_name_is_refused_by_the_witness_while_running() {
    use mcp_confirm_log::{AuditLog, LogOptions};
    let witness_dir = fresh_dir("insider-second-witness");
    let witness = || DirWitness::new(&witness_dir, key().verifier()).unwrap();
    let second = AuditLog::file(
        fresh_dir("insider-second-b"),
        key(),
        LogOptions {
            fsync: Fsync::Never,
            witnesses: vec![std::sync::Arc::new(witness())],
            ..LogOptions::default()
        },
    )
    .unwrap();
    let mut first = FileLog::open_with(
        fresh_dir("insider-second-a"),
        key(),
        FileOptions::default()
            .fsync(Fsync::Never)
            .witness(witness()),
    )
    .unwrap();
    for i in 0..5 {
        first.append(&mut [decision(i)]).unwrap();
    }
    first.checkpoint().unwrap();
    for i in 0..3 {
        second.append(decision(100 + i)).unwrap();
    }
    assert!(
        second.flush().is_err(),
        "the witness took a second log's checkpoint"
    );
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(!second.is_healthy(), "a log a witness refused came back up");
    assert!(second.append_durable(decision(200)).is_err());
}

/// A checkpoint file numbered at the end of the range (a copy of a genuine one) would have the
/// writer's numbering wrap and its view stop moving: it is newer than any checkpoint the writer
/// recorded, so the log does not open.
#[test]
fn a_checkpoint_numbered_past_the_writers_is_a_stop() {
    let dir = two_checkpoints("insider-max-number", 3, 6);
    fs::copy(checkpoint_path(&dir, 2), checkpoint_path(&dir, u64::MAX)).unwrap();
    refused(
        &dir,
        FileOptions::default(),
        "newer than any the writer recorded",
    );
    let dir = two_checkpoints("insider-next-number", 3, 6);
    // One past the view is the crash window (signed, not yet recorded): it must still be a
    // checkpoint of at least what the view says.
    fs::copy(checkpoint_path(&dir, 1), checkpoint_path(&dir, 3)).unwrap();
    refused(
        &dir,
        FileOptions::default(),
        "newer than any the writer recorded",
    );
}

/// A checkpoint file someone put at the number the writer signs next is not replaced: the
/// writer stops.
#[test]
fn a_checkpoint_at_the_next_number_is_never_renamed_over() {
    let dir = fresh_dir("insider-next-file");
    let mut log = FileLog::open(&dir, key(), Fsync::Never).unwrap();
    log.append(&mut [decision(0)]).unwrap();
    log.checkpoint().unwrap();
    fs::write(checkpoint_path(&dir, 2), "planted").unwrap();
    log.append(&mut [decision(1)]).unwrap();
    assert!(matches!(log.checkpoint(), Err(LogError::Damaged(_))));
    assert_eq!(
        fs::read_to_string(checkpoint_path(&dir, 2)).unwrap(),
        "planted"
    );
    assert!(matches!(
        log.append(&mut [decision(2)]),
        Err(LogError::Damaged(_))
    ));
}

/// `adopt-legacy` writes a view only for a log from before tags: a tagged log whose view was
/// removed (with records cut) is refused, and it needs a checkpoint kept elsewhere.
#[test]
fn adopting_a_tagged_log_whose_view_was_removed_is_refused() {
    let dir = two_checkpoints("insider-adopt", 3, 6);
    let kept = fs::read_to_string(checkpoint_path(&dir, 1)).unwrap();
    let kept = key().verifier().open(&kept).unwrap();
    fs::remove_file(dir.join(VIEW)).unwrap();
    fs::remove_file(checkpoint_path(&dir, 2)).unwrap();
    write_lines(&dir, &lines(&dir)[..3]);
    assert!(matches!(
        file::adopt_legacy(&dir, None, &key(), std::slice::from_ref(&kept)),
        Err(LogError::Damaged(why)) if why.contains("tags")
    ));
    assert!(matches!(
        file::adopt_legacy(&dir, None, &key(), &[]),
        Err(LogError::Damaged(_))
    ));
    refused(&dir, FileOptions::default(), "view");
}

/// A running log of three records, signed, whose records file an insider then renamed over
/// with a copy of itself.
fn replaced_while_running(name: &str, fsync: Fsync) -> FileLog {
    let dir = fresh_dir(name);
    let mut log = FileLog::open(&dir, key(), fsync).unwrap();
    for i in 0..3 {
        log.append(&mut [decision(i)]).unwrap();
    }
    log.checkpoint().unwrap();
    let copy = dir.join("copy");
    fs::copy(dir.join(RECORDS), &copy).unwrap();
    fs::rename(&copy, dir.join(RECORDS)).unwrap();
    log
}

/// The records file renamed over while the log runs: the next append and the next checkpoint
/// refuse, and the log stays down.
#[test]
fn a_records_file_replaced_while_running_stops_the_writer() {
    let mut log = replaced_while_running("insider-replaced", Fsync::Never);
    assert!(matches!(
        log.append(&mut [decision(3)]),
        Err(LogError::Damaged(_))
    ));
    assert!(matches!(log.checkpoint(), Err(LogError::Damaged(_))));
    assert!(matches!(log.recover(), Err(LogError::Damaged(_))));
}

/// The same with the default syncing, where the syncer looks at the path at every sync rather
/// than every append: an append within a sync's reach of the replacement may still go to the
/// file it replaced (the writer's own, now under another name), and then the log stops: no
/// checkpoint, no further append, no recovery.
#[test]
fn a_records_file_replaced_under_the_syncer_stops_the_writer_within_a_sync() {
    let mut log = replaced_while_running("insider-replaced-synced", Fsync::EveryBatch);
    let mut stopped = None;
    for i in 3..1_000 {
        match log.append(&mut [decision(i)]) {
            Ok(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            Err(e) => {
                stopped = Some((i, e));
                break;
            }
        }
    }
    let (at, error) = stopped.expect("the replaced records file was never noticed");
    assert!(
        matches!(error, LogError::Damaged(ref why) if why.contains("replaced")),
        "{error}"
    );
    // Noticed at the first sync after the replacement: a few appends at most (one sync every
    // 10 ms at most, an append every 5 ms here; slack for a loaded machine).
    assert!(at < 200, "noticed only at append {at}");
    assert!(matches!(
        log.append(&mut [decision(at)]),
        Err(LogError::Damaged(_))
    ));
    assert!(matches!(log.checkpoint(), Err(LogError::Damaged(_))));
    assert!(matches!(log.recover(), Err(LogError::Damaged(_))));
}

/// The directory itself is locked: removing a lock file does not let a second writer in.
#[test]
fn a_second_writer_stays_out_whatever_is_deleted() {
    let dir = fresh_dir("insider-lock");
    let _first = FileLog::open(&dir, key(), Fsync::Never).unwrap();
    let _ = fs::remove_file(dir.join(file::LOCK));
    assert!(matches!(
        FileLog::open(&dir, key(), Fsync::Never),
        Err(LogError::Locked)
    ));
}

/// What an insider puts where the writer reads: a FIFO as a checkpoint, the view a link to an
/// endless file, a line far longer than any record. Each is a clear error or a stop, never a
/// hang, a panic or unbounded memory.
#[test]
fn hostile_files_are_errors_not_hangs() {
    let dir = two_checkpoints("insider-fifo", 3, 6);
    let fifo = checkpoint_path(&dir, 3);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let (done, wait) = std::sync::mpsc::channel();
    let opened = dir.clone();
    std::thread::spawn(move || {
        let _ = done.send(FileLog::open(&opened, key(), Fsync::Never).map(|_| ()));
    });
    let outcome = wait
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("opening a log with a FIFO for a checkpoint hung");
    assert!(outcome.is_err());
    fs::remove_file(&fifo).unwrap();

    let dir = two_checkpoints("insider-zero", 3, 6);
    fs::remove_file(dir.join(VIEW)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join(VIEW)).unwrap();
    assert!(FileLog::open(&dir, key(), Fsync::Never).is_err());

    let dir = two_checkpoints("insider-long", 3, 6);
    let mut all = lines(&dir);
    all.push("x".repeat(8 * 1024 * 1024));
    write_lines(&dir, &all);
    refused(&dir, FileOptions::default(), "line 6 is not a record");
}
