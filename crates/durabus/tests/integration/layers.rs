//! The layers point one way (`bus → dispatch → store`; the capability modules use the store):
//! no module below imports from one above. Checked on the source text, so a back import fails
//! the suite instead of waiting for a review.

use std::path::{Path, PathBuf};

fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// Every `use`/path mention of `crate::<module>` (or `super::…` reaching it) in `layer`.
fn imports_of(layer: &str, forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(layer);
    let files = if root.is_dir() {
        sources(&root)
    } else {
        vec![root]
    };
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for module in forbidden {
                if code.contains(&format!("crate::{module}::"))
                    || code.contains(&format!("crate::{module};"))
                    || code.contains(&format!("crate::{module}}}"))
                {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn dispatch_never_imports_the_bus() {
    let found = imports_of("dispatch", &["bus"]);
    assert!(found.is_empty(), "{found:#?}");
}

/// Every mention of one of `names` (as a whole word) in the code of `layer`.
fn names_in(layer: &str, names: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(layer);
    let mut found = Vec::new();
    for file in sources(&root) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let words: Vec<&str> = code
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .collect();
            if names.iter().any(|name| words.contains(name)) {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn stores_never_import_the_bus_the_dispatcher_or_a_service() {
    let found = imports_of(
        "store",
        &["bus", "dispatch", "history", "stats", "scheduler"],
    );
    assert!(found.is_empty(), "{found:#?}");
    // The stores use the capabilities' data and pure rules, never their services or runners.
    let found = names_in(
        "store",
        &[
            "DeadLetters",
            "DlqInspector",
            "Operations",
            "Replays",
            "Payloads",
            "Scheduler",
            "ConfigSource",
        ],
    );
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn pure_models_import_no_layer() {
    for model in [
        "actor.rs",
        "retry.rs",
        "breaker.rs",
        "pattern.rs",
        "event.rs",
        "clock.rs",
    ] {
        let found = imports_of(
            model,
            &[
                "bus",
                "dispatch",
                "store",
                "dlq",
                "operation",
                "replay",
                "payload",
                "scheduler",
                "telemetry",
            ],
        );
        assert!(found.is_empty(), "{model}: {found:#?}");
    }
}

#[test]
fn capabilities_use_the_store_only() {
    for layer in [
        "dlq",
        "operation",
        "replay",
        "payload",
        "scheduler",
        "telemetry",
        "history.rs",
        "stats.rs",
    ] {
        let found = imports_of(layer, &["bus", "dispatch"]);
        assert!(found.is_empty(), "{layer}: {found:#?}");
    }
}

#[test]
fn the_checker_finds_a_back_import() {
    // The bus does import the dispatcher: the same scan finds it there.
    assert!(!imports_of("bus", &["dispatch"]).is_empty());
}
