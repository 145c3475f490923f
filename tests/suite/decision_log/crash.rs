//! Crashes and full disks, in child processes: a writer killed with SIGKILL at random moments,
//! eight times over one log, and a writer whose file-size limit is a full disk. Each child is
//! this test binary again, running one `#[ignore]`d test named below with the log's directory
//! in an environment variable.

use std::process::{Command, Stdio};
use std::time::Duration;

use mcp_confirm::audit_log::{AuditLog, FileLog, Finding, Fsync, LogError, LogOptions, verify};

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
