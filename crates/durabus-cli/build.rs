//! Links the release binary with its hot functions side by side (`hot-symbols.txt`, written by
//! `scripts/hot-symbols`): the kernel maps code in 64 KiB windows around each page touched, so
//! functions a running bus executes, spread over the whole binary, would make most of it
//! resident. Only on x86-64 Linux with Rust 1.90 or later, whose default linker there (rust-lld)
//! takes `--symbol-ordering-file`; `DURABUS_NO_SYMBOL_ORDER=1` turns it off for a linker that
//! does not.

use std::process::Command;

/// The first Rust release whose default linker on x86-64 Linux is rust-lld.
const LLD_BY_DEFAULT: u32 = 90;

fn main() {
    println!("cargo:rerun-if-changed=hot-symbols.txt");
    println!("cargo:rerun-if-env-changed=DURABUS_NO_SYMBOL_ORDER");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let target = std::env::var("TARGET").unwrap_or_default();
    let off = std::env::var("DURABUS_NO_SYMBOL_ORDER").is_ok_and(|v| !v.is_empty() && v != "0");
    if !release || target != "x86_64-unknown-linux-gnu" || off || !rust_lld_by_default() {
        return;
    }
    let Ok(dir) = std::env::var("CARGO_MANIFEST_DIR") else {
        return;
    };
    let list = std::path::Path::new(&dir).join("hot-symbols.txt");
    if list.exists() {
        println!(
            "cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            list.display()
        );
        // Names the binary no longer has (the list predates a change) are skipped silently.
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// Whether the compiler building this links with rust-lld by default (1.90 and later).
fn rust_lld_by_default() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("-V").output() else {
        return false;
    };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let version = String::from_utf8_lossy(&out.stdout);
    let minor = version
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.split('.').nth(1))
        .and_then(|m| m.parse::<u32>().ok());
    version.contains("rustc 1.") && minor.is_some_and(|m| m >= LLD_BY_DEFAULT)
}
