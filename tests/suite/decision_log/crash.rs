//! Crashes and full disks, in child processes: a writer killed with SIGKILL at random moments,
//! eight times over one log, and a writer whose file-size limit is a full disk. Each child is
//! this test binary again, running one `#[ignore]`d test named below with the log's directory
//! in an environment variable.

use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_confirm_log::{AuditLog, FileLog, Finding, Fsync, LogError, LogOptions, verify};

use super::{decision, fresh_dir, key};

const CHILD_DIR: &str = "MCP_CONFIRM_LOG_CHILD_DIR";

/// This test binary, running only `test` (ignored in a normal run) as a child.
fn child(test: &str, dir: &std::path::Path) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    command
}

fn options(every_records: u64) -> LogOptions {
    LogOptions {
        every_records,
        every: Duration::from_millis(20),
        fsync: Fsync::EveryBatch,
        ..LogOptions::default()
    }
}

/// The child: appends records as fast as the queue takes them, forever.
#[test]
#[ignore = "a child process of the kill -9 test"]
fn child_appends_until_killed() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let log = AuditLog::file(dir, key(), options(7)).unwrap();
    // Something signed before the parent starts its clock, however slowly this started.
    log.append(decision(0)).unwrap();
    log.flush().unwrap();
    println!("READY");
    for i in 1.. {
        if log.append(decision(i)).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[test]
fn kill_9_in_a_loop_never_loses_a_signed_record_nor_signs_a_fork() {
    let dir = fresh_dir("kill9");
    let mut seen: Vec<String> = Vec::new();
    let mut signed = 0;
    for round in 0..8u64 {
        let mut writer = child("decision_log::crash::child_appends_until_killed", &dir)
            .spawn()
            .unwrap();
        let mut ready = String::new();
        let mut out = std::io::BufReader::new(writer.stdout.take().unwrap());
        while !ready.contains("READY") {
            ready.clear();
            assert_ne!(
                std::io::BufRead::read_line(&mut out, &mut ready).unwrap(),
                0,
                "round {round}: the child ended before it was ready"
            );
        }
        std::thread::sleep(Duration::from_millis(60 + (round * 37) % 150));
        writer.kill().unwrap();
        writer.wait().unwrap();
        // Whatever the kill cut, the writer comes back on it, and the log verifies with every
        // checkpoint seen so far (no fork, no rollback).
        let log = FileLog::open(&dir, key(), Fsync::Never).unwrap_or_else(|e| {
            panic!("round {round}: the log does not reopen after kill -9: {e}")
        });
        assert!(log.size() >= signed, "round {round}: records lost");
        if let Some(latest) = log.last_checkpoint() {
            signed = latest.checkpoint.size;
            seen.push(latest.text.clone());
        }
        drop(log);
        let verified = verify(&dir, &key().verifier(), &seen).unwrap();
        assert!(
            verified.is_sound(),
            "round {round}: {:?}",
            verified.findings
        );
    }
    assert!(signed > 0, "the children wrote and signed something");
}

/// The child: a writer whose file-size limit (set by `prlimit`, with SIGXFSZ ignored) runs out
/// like a full disk. Prints what it saw.
#[test]
#[ignore = "a child process of the full-disk test"]
fn child_fills_the_disk() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let log = AuditLog::file(dir, key(), options(1_000_000)).unwrap();
    let mut accepted = 0u64;
    for i in 0..100_000 {
        match log.append(decision(i)) {
            Ok(()) => accepted += 1,
            Err(LogError::Unavailable) if !log.is_healthy() => {
                println!("DOWN after {accepted} accepted");
                return;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    println!("NEVER DOWN");
}

#[test]
fn a_full_disk_takes_the_log_down_and_what_was_written_still_verifies() {
    let dir = fresh_dir("full");
    let exe = std::env::current_exe().unwrap();
    // 64 KiB of records at most; SIGXFSZ ignored, so a write past it fails as on a full disk.
    let output = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; exec prlimit --fsize=65536 \"$0\" --exact decision_log::crash::child_fills_the_disk --ignored --nocapture --test-threads=1")
        .arg(&exe)
        .env(CHILD_DIR, &dir)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("DOWN after"), "{stdout}");
    // Reopened with room again, the log recovers what reached the file and verifies.
    let mut log = FileLog::open(&dir, key(), Fsync::Never).unwrap();
    let size = log.size();
    assert!(size > 0);
    log.append(&mut [decision(size)]).unwrap();
    log.checkpoint().unwrap();
    let verified = verify(&dir, &key().verifier(), &[]).unwrap();
    assert!(
        verified
            .findings
            .iter()
            .all(|f| matches!(f, Finding::TornTail { .. })),
        "{:?}",
        verified.findings
    );
    assert_eq!(verified.records.len() as u64, size + 1);
}

/// The child: durable appends under a file-size limit. Prints each record the log said was
/// written (`ACK note-N`), goes on for a while after writes start failing (so the writer
/// retries many times), then `DONE`.
#[test]
#[ignore = "a child process of the full-disk durable test"]
fn child_appends_durably_until_the_disk_is_full() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let log = AuditLog::file(dir, key(), options(1_000_000)).unwrap();
    let mut failed_since = None;
    for i in 0..100_000u64 {
        let written = match log.append_durable(decision(i)) {
            Ok(durable) => runtime.block_on(durable).is_ok(),
            Err(_) => false,
        };
        if written {
            println!("ACK note-{i}");
        } else {
            let since = *failed_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() > Duration::from_millis(500) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    println!("DONE");
}

/// Issue 33, attack 3 on a real file-size limit: every record the log acknowledged is in it
/// after a restart, and half a second of retries against the full disk moved nothing aside.
#[test]
fn on_a_full_disk_every_acknowledged_record_is_kept_and_retries_create_nothing() {
    let dir = fresh_dir("full-durable");
    let exe = std::env::current_exe().unwrap();
    let output = Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; exec prlimit --fsize=65536 \"$0\" --exact decision_log::crash::child_appends_durably_until_the_disk_is_full --ignored --nocapture --test-threads=1")
        .arg(&exe)
        .env(CHILD_DIR, &dir)
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("DONE"), "{stdout}");
    let acked: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ACK "))
        .collect();
    assert!(acked.len() > 10, "{stdout}");
    let cut = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .contains(".cut")
            })
            .count()
    };
    assert_eq!(cut(&dir), 0, "retries moved records aside");
    let log = FileLog::open(&dir, key(), Fsync::Never).unwrap();
    drop(log);
    let verified = verify(&dir, &key().verifier(), &[]).unwrap();
    assert!(verified.is_sound(), "{:?}", verified.findings);
    let kept: std::collections::HashSet<&str> = verified
        .records
        .iter()
        .filter_map(|r| r.chosen.as_deref())
        .collect();
    for chosen in &acked {
        assert!(
            kept.contains(chosen),
            "{chosen} was acknowledged and is not in the log"
        );
    }
    assert!(
        cut(&dir) <= 1,
        "at most the one torn line of the last failed write"
    );
}
