//! The decision log in PostgreSQL for several instances: one sequence however many write, one
//! signing instance at a time (the holder of the advisory lock) that takes over when the other
//! stops, an append-only table, and the attacks on it: a row edited or deleted by someone who
//! disabled the trigger is named by the verifier on the export, and the signing instance
//! refuses to sign over it.

use std::time::Duration;

use mcp_confirm_log::postgres::export;
use mcp_confirm_log::{AuditLog, Finding, LogOptions, LogSink, PostgresLog, verify};

use super::{decision, fresh_dir, key};

/// A fresh table, dropped when the test ends.
struct Table(String);

impl Table {
    fn fresh() -> Option<Self> {
        let url = crate::backends::postgres_url();
        match sql(&url, "SELECT 1") {
            Ok(()) => {}
            Err(e) => {
                return crate::backends::unavailable("Postgres decision-log test", "Postgres", e);
            }
        }
        let n = mcp_confirm::store::Nonce::random().to_hex();
        Some(Self(format!("mcp_confirm_log_{}", &n[..12])))
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        let t = &self.0;
        let _ = sql(
            &crate::backends::postgres_url(),
            &format!(
                "DROP TABLE IF EXISTS {t}, {t}_checkpoints; DROP FUNCTION IF EXISTS {t}_append_only()"
            ),
        );
    }
}

/// Runs `statements` on a connection of its own (from any thread, async or not).
fn sql(url: &str, statements: &str) -> Result<(), String> {
    let (url, statements) = (url.to_owned(), statements.to_owned());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            client.batch_execute(&statements).await.map_err(|e| {
                e.as_db_error()
                    .map_or_else(|| e.to_string(), |db| db.message().to_owned())
            })
        })
    })
    .join()
    .map_err(|_| "panicked".to_owned())?
}

fn instance(table: &Table, name: &str) -> AuditLog {
    let sink = PostgresLog::connect(&crate::backends::postgres_url(), &table.0, key()).unwrap();
    let options = LogOptions {
        every: Duration::from_millis(50),
        every_records: 100,
        instance: name.into(),
        ..LogOptions::default()
    };
    AuditLog::new(sink, key().verifier(), options).unwrap()
}

fn exported(table: &Table) -> mcp_confirm_log::Verified {
    let dir = fresh_dir("pg-export");
    export(&crate::backends::postgres_url(), &table.0, &dir).unwrap();
    verify(&dir, &key().verifier(), &[]).unwrap()
}

/// Flushes `logs` until one of them has signed a checkpoint of all `n` records.
fn signed_all(logs: &[&AuditLog], table: &Table, n: u64) {
    for _ in 0..200 {
        for log in logs {
            log.flush().unwrap();
        }
        if exported(table).latest().is_some_and(|c| c.size == n) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no instance signed all {n} records");
}

#[test]
fn two_instances_write_one_sequence_and_one_signed_tree() {
    let Some(table) = Table::fresh() else { return };
    let (a, b) = (instance(&table, "a"), instance(&table, "b"));
    let writers: Vec<_> = [a.clone(), b.clone()]
        .into_iter()
        .map(|log| {
            std::thread::spawn(move || {
                for i in 0..300 {
                    log.append(decision(i)).unwrap();
                    if i % 50 == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    signed_all(&[&a, &b], &table, 600);
    let verified = exported(&table);
    assert!(verified.is_sound(), "{:?}", verified.findings);
    assert_eq!(verified.records.len(), 600);
    assert!(
        verified
            .records
            .iter()
            .enumerate()
            .all(|(i, r)| r.seq == i as u64)
    );
    for name in ["a", "b"] {
        assert_eq!(
            verified
                .records
                .iter()
                .filter(|r| r.instance == name)
                .count(),
            300
        );
    }
    assert!(!verified.checkpoints.is_empty());
}

#[test]
fn another_instance_signs_once_the_signing_one_stops() {
    let Some(table) = Table::fresh() else { return };
    let a = instance(&table, "a");
    a.append(decision(0)).unwrap();
    signed_all(&[&a], &table, 1);
    let b = instance(&table, "b");
    b.append(decision(1)).unwrap();
    // `a` holds the lock: `b` signs nothing itself, but `a` signs what `b` wrote.
    assert_eq!(b.flush().unwrap(), None);
    signed_all(&[&a], &table, 2);
    drop(a);
    b.append(decision(2)).unwrap();
    let signed = b.flush().unwrap().expect("b took over the signing");
    assert_eq!(signed.checkpoint.size, 3);
    let verified = exported(&table);
    assert!(verified.is_sound(), "{:?}", verified.findings);
}

#[test]
fn the_table_refuses_edits_and_deletes() {
    let Some(table) = Table::fresh() else { return };
    let a = instance(&table, "a");
    a.append(decision(0)).unwrap();
    signed_all(&[&a], &table, 1);
    let url = crate::backends::postgres_url();
    let t = &table.0;
    let edit = sql(
        &url,
        &format!("UPDATE {t} SET line = replace(line, 'note-0', 'note-9')"),
    );
    assert!(edit.is_err_and(|e| e.contains("append-only")));
    let delete = sql(&url, &format!("DELETE FROM {t}"));
    assert!(delete.is_err_and(|e| e.contains("append-only")));
    let forget = sql(&url, &format!("DELETE FROM {t}_checkpoints"));
    assert!(forget.is_err_and(|e| e.contains("append-only")));
}

/// Someone with the right to disable the trigger edits a signed record: the export names it,
/// and the signing instance stops rather than sign a tree that contradicts its checkpoint.
#[test]
fn an_edit_behind_the_triggers_back_is_named_and_never_signed_over() {
    let Some(table) = Table::fresh() else { return };
    let a = instance(&table, "a");
    for i in 0..5 {
        a.append(decision(i)).unwrap();
    }
    signed_all(&[&a], &table, 5);
    drop(a);
    let (url, t) = (crate::backends::postgres_url(), &table.0);
    sql(
        &url,
        &format!(
            "ALTER TABLE {t} DISABLE TRIGGER {t}_append_only;
             UPDATE {t} SET line = replace(line, 'note-2', 'note-7') WHERE seq = 2;
             ALTER TABLE {t} ENABLE TRIGGER {t}_append_only;"
        ),
    )
    .unwrap();
    let verified = exported(&table);
    assert!(
        verified
            .findings
            .iter()
            .any(|f| matches!(f, Finding::RootMismatch { .. })),
        "{:?}",
        verified.findings
    );
    // A new signing instance reads the tree, finds it does not match what was signed, and
    // refuses: no checkpoint over the edit, and the log is down (fail closed).
    let mut sink = PostgresLog::connect(&url, t, key()).unwrap();
    assert!(matches!(
        sink.checkpoint(),
        Err(mcp_confirm_log::LogError::Damaged(_))
    ));
    assert!(matches!(
        sink.recover(),
        Err(mcp_confirm_log::LogError::Damaged(_))
    ));
    let b = instance(&table, "b");
    b.append(decision(5)).unwrap();
    assert!(b.flush().is_err());
    let verified = exported(&table);
    assert_eq!(
        verified.latest().map(|c| c.size),
        Some(5),
        "nothing was signed after the edit"
    );
}

#[test]
fn a_deleted_row_is_named() {
    let Some(table) = Table::fresh() else { return };
    let a = instance(&table, "a");
    for i in 0..4 {
        a.append(decision(i)).unwrap();
    }
    signed_all(&[&a], &table, 4);
    drop(a);
    let (url, t) = (crate::backends::postgres_url(), &table.0);
    sql(
        &url,
        &format!(
            "ALTER TABLE {t} DISABLE TRIGGER {t}_append_only;
             DELETE FROM {t} WHERE seq = 1;
             ALTER TABLE {t} ENABLE TRIGGER {t}_append_only;"
        ),
    )
    .unwrap();
    let verified = exported(&table);
    assert!(!verified.is_sound());
    assert!(
        verified
            .findings
            .iter()
            .any(|f| matches!(f, Finding::OutOfSequence { .. } | Finding::Truncated { .. })),
        "{:?}",
        verified.findings
    );
}

#[test]
fn the_table_refuses_truncate() {
    let Some(table) = Table::fresh() else { return };
    let a = instance(&table, "a");
    a.append(decision(0)).unwrap();
    signed_all(&[&a], &table, 1);
    let (url, t) = (crate::backends::postgres_url(), &table.0);
    for target in [t.clone(), format!("{t}_checkpoints")] {
        let truncate = sql(&url, &format!("TRUNCATE {target}"));
        assert!(
            truncate.as_ref().is_err_and(|e| e.contains("append-only")),
            "{target}: {truncate:?}"
        );
    }
}

/// As the tables' owner: copy the rows, set the triggers aside, TRUNCATE both tables and put
/// the rows back with one changed (issue 33, attack 4).
fn rewrite_with_one_row_changed(t: &str) {
    sql(
        &crate::backends::postgres_url(),
        &format!(
            "ALTER TABLE {t} DISABLE TRIGGER USER;
             ALTER TABLE {t}_checkpoints DISABLE TRIGGER USER;
             CREATE TEMP TABLE saved AS SELECT * FROM {t};
             CREATE TEMP TABLE saved_checkpoints AS SELECT * FROM {t}_checkpoints;
             TRUNCATE {t}, {t}_checkpoints;
             INSERT INTO {t} SELECT seq, CASE WHEN seq = 2 THEN replace(line, 'note-2', 'note-7') ELSE line END FROM saved;
             INSERT INTO {t}_checkpoints SELECT * FROM saved_checkpoints WHERE size < 3;
             ALTER TABLE {t} ENABLE TRIGGER USER;
             ALTER TABLE {t}_checkpoints ENABLE TRIGGER USER;"
        ),
    )
    .unwrap();
}

#[test]
fn a_truncated_and_rewritten_table_stops_the_running_signer_and_is_never_signed() {
    let Some(table) = Table::fresh() else { return };
    let a = instance(&table, "a");
    for i in 0..5 {
        a.append(decision(i)).unwrap();
    }
    signed_all(&[&a], &table, 5);
    rewrite_with_one_row_changed(&table.0);
    // The running signer sees the table is not the one it read: it stops signing and the log
    // goes down, so a fail-closed layer refuses destructive calls. (It may have already: it
    // checks at every round, and rounds run every 50 ms.)
    let _ = a.append(decision(5));
    assert!(
        a.flush().is_err(),
        "the signer signed over a rewritten table"
    );
    assert!(!a.is_healthy());
    assert!(a.append_durable(decision(6)).is_err());
    drop(a);
    // A restarted signer reads the rows again: row 2's tag is not its writer's.
    let mut sink = PostgresLog::connect(&crate::backends::postgres_url(), &table.0, key()).unwrap();
    match sink.checkpoint() {
        Err(mcp_confirm_log::LogError::Damaged(why)) => {
            assert!(why.contains("record 2"), "{why}");
        }
        other => panic!("a restarted signer signed a rewritten table: {other:?}"),
    }
    let verified = exported(&table);
    assert!(
        verified.latest().is_none_or(|c| c.size < 5),
        "nothing was signed over the rewrite"
    );
}

#[test]
fn a_table_rolled_back_to_an_old_dump_is_caught_by_a_witness() {
    let Some(table) = Table::fresh() else { return };
    let witness_dir = fresh_dir("pg-witness");
    let witnessed = || {
        let sink = PostgresLog::connect(&crate::backends::postgres_url(), &table.0, key())
            .unwrap()
            .witness(mcp_confirm_log::DirWitness::new(&witness_dir, key().verifier()).unwrap());
        let options = LogOptions {
            every: Duration::from_millis(50),
            instance: "a".into(),
            ..LogOptions::default()
        };
        AuditLog::new(sink, key().verifier(), options).unwrap()
    };
    let a = witnessed();
    for i in 0..6 {
        a.append(decision(i)).unwrap();
    }
    signed_all(&[&a], &table, 6);
    drop(a);
    // The owner restores a dump taken at 3 records: consistent in itself, tags and all.
    let t = &table.0;
    sql(
        &crate::backends::postgres_url(),
        &format!(
            "ALTER TABLE {t} DISABLE TRIGGER USER;
             ALTER TABLE {t}_checkpoints DISABLE TRIGGER USER;
             DELETE FROM {t} WHERE seq >= 3;
             DELETE FROM {t}_checkpoints WHERE size > 3;
             ALTER TABLE {t} ENABLE TRIGGER USER;
             ALTER TABLE {t}_checkpoints ENABLE TRIGGER USER;"
        ),
    )
    .unwrap();
    let b = witnessed();
    b.append(decision(3)).unwrap();
    assert!(
        b.flush().is_err(),
        "signed a table the witness knows was longer"
    );
    assert!(!b.is_healthy());
}

/// Flushes `log` until it reports an error (the signer checks at every round), for at most
/// `seconds`.
fn goes_down(log: &AuditLog, seconds: u64) -> bool {
    let until = std::time::Instant::now() + Duration::from_secs(seconds);
    while std::time::Instant::now() < until {
        let _ = log.append(decision(900));
        if log.flush().is_err() && !log.is_healthy() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Rows the running instance wrote itself and no checkpoint covers yet, deleted behind the
/// triggers by the tables' owner: the instance notices instead of numbering new rows over them.
#[test]
fn rows_deleted_while_running_stop_the_signer() {
    let Some(table) = Table::fresh() else { return };
    let a = instance(&table, "a");
    for i in 0..5 {
        a.append(decision(i)).unwrap();
    }
    signed_all(&[&a], &table, 5);
    let t = &table.0;
    sql(
        &crate::backends::postgres_url(),
        &format!(
            "ALTER TABLE {t} DISABLE TRIGGER USER;
             DELETE FROM {t} WHERE seq >= 3;
             ALTER TABLE {t} ENABLE TRIGGER USER;"
        ),
    )
    .unwrap();
    assert!(goes_down(&a, 10), "the signer went on over deleted rows");
    assert!(exported(&table).latest().is_some_and(|c| c.size == 5));
}

/// An edit and a deletion in the middle (the highest seq unchanged), triggers set aside and
/// put back between two rounds: the statistics show rows updated and deleted, and the running
/// signer stops.
#[test]
fn rows_rewritten_while_running_stop_the_signer() {
    let Some(table) = Table::fresh() else { return };
    let a = instance(&table, "a");
    for i in 0..6 {
        a.append(decision(i)).unwrap();
    }
    signed_all(&[&a], &table, 6);
    let t = &table.0;
    sql(
        &crate::backends::postgres_url(),
        &format!(
            "ALTER TABLE {t} DISABLE TRIGGER USER;
             UPDATE {t} SET line = replace(line, 'note-1', 'note-9') WHERE seq = 1;
             DELETE FROM {t} WHERE seq = 2;
             ALTER TABLE {t} ENABLE TRIGGER USER;"
        ),
    )
    .unwrap();
    assert!(goes_down(&a, 15), "the signer went on over rewritten rows");
}

/// Triggers left disabled: the signer stops at its next round, before anything is changed.
#[test]
fn disabled_triggers_stop_the_signer() {
    let Some(table) = Table::fresh() else { return };
    let a = instance(&table, "a");
    a.append(decision(0)).unwrap();
    signed_all(&[&a], &table, 1);
    let t = &table.0;
    sql(
        &crate::backends::postgres_url(),
        &format!("ALTER TABLE {t} DISABLE TRIGGER {t}_append_only;"),
    )
    .unwrap();
    assert!(
        goes_down(&a, 10),
        "the signer went on with its triggers disabled"
    );
}

/// The application's role may insert: a row numbered below zero is refused by the table, and
/// one slipped in past the constraint stops the signer.
#[test]
fn a_row_numbered_below_zero_is_refused() {
    let Some(table) = Table::fresh() else { return };
    let a = instance(&table, "a");
    a.append(decision(0)).unwrap();
    signed_all(&[&a], &table, 1);
    let (url, t) = (crate::backends::postgres_url(), &table.0);
    let insert = sql(&url, &format!("INSERT INTO {t} VALUES (-1, 'forged')"));
    assert!(insert.is_err(), "{insert:?}");
    sql(
        &url,
        &format!(
            "ALTER TABLE {t} DROP CONSTRAINT {t}_seq_natural;
             INSERT INTO {t} VALUES (-1, 'forged');"
        ),
    )
    .unwrap();
    assert!(
        goes_down(&a, 10),
        "the signer went on with a forged row below zero"
    );
}

/// A trigger set to fire only on replicas does not fire for the application: the signer treats
/// it as disabled.
#[test]
fn triggers_set_to_fire_only_on_replicas_stop_the_signer() {
    let Some(table) = Table::fresh() else { return };
    let a = instance(&table, "a");
    a.append(decision(0)).unwrap();
    signed_all(&[&a], &table, 1);
    let t = &table.0;
    sql(
        &crate::backends::postgres_url(),
        &format!("ALTER TABLE {t} ENABLE REPLICA TRIGGER {t}_no_truncate;"),
    )
    .unwrap();
    assert!(
        goes_down(&a, 10),
        "the signer went on with a replica-only trigger"
    );
}
