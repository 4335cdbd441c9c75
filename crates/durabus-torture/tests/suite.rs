//! The suite's short kill loop as part of the test command: a few SQLite lives killed with
//! SIGKILL, then the checker. (`.ci/run` runs the full short form and the broken-build
//! self-test.)
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

fn torture(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_durabus-torture"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn a_short_sqlite_kill_loop_loses_nothing() {
    let (ok, out) = torture(&["--no-pg", "--only", "sqlite-kill", "--cycles", "4"]);
    assert!(ok, "{out}");
    assert!(out.contains("ok sqlite kill -9: 4 cycles"), "{out}");
    assert!(out.contains(" acknowledged, 0 lost, "), "{out}");
}

#[test]
fn unknown_scenarios_are_refused() {
    let (ok, out) = torture(&["--only", "sqlite-kil"]);
    assert!(!ok);
    assert!(out.contains("unknown scenario \"sqlite-kil\""), "{out}");
}

#[test]
fn the_list_names_every_scenario() {
    let (ok, out) = torture(&["list"]);
    assert!(ok, "{out}");
    for name in [
        "sqlite-clean",
        "sqlite-kill",
        "failpoints",
        "handlers",
        "storage",
        "hostile",
        "load",
        "pg-clean",
        "pg-kill",
        "pg-restart",
    ] {
        assert!(out.contains(name), "{out}");
    }
}
