//! A closed standard output (`durabus … | head -1`): every command stops quietly, with status
//! 0, never a panic. The pipe's reading end is closed before the command starts, so its first
//! write already fails, whatever the timing.

use super::*;

/// Runs `durabus --db db args…` with its standard output a pipe nobody reads.
fn into_closed_pipe(db: &Path, args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    std::process::Command::new(env!("CARGO_BIN_EXE_durabus"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("RUST_LOG")
        .env("RUST_BACKTRACE", "1")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn commands_stop_quietly_on_a_closed_standard_output() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("pipes.db");
    enqueue_many(&db, 50);
    for args in [
        &["events", "list"][..],
        &["events", "list", "--json"],
        &["dlq", "list"],
        &["stats"],
        &["replay", "start", "--all", "--preview"],
        &["replay", "start", "--all", "--dry-run"],
        &["payload-config", "list"],
        &["jobs", "list"],
    ] {
        let o = into_closed_pipe(&db, args);
        let err = stderr(&o);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
    }
}
