//! The file side of the script runners (`paxos_scripts.rs`, `node_scripts.rs`): where the scripts
//! are, running one against its file, and the check that every script has a test. The format
//! itself is `picket_core::testkit::script`.
// The golden files are test fixtures: the no-IO rule is for the library, not its tests.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

use picket_core::testkit::script::{self, Block};

/// `core/testdata/<dir>/<name>.txt`.
pub fn path(dir: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(dir)
        .join(format!("{name}.txt"))
}

/// Runs the script at `path` through `step`. A difference from the file fails the test; with
/// `UPDATE_TESTDATA` set the file is rewritten with what the commands produced instead (review
/// the diff), and a failed check is never written.
pub fn run_file(path: &Path, step: impl FnMut(&Block, &str) -> Vec<String>) {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read script {}: {e}", path.display()));
    let update = std::env::var_os("UPDATE_TESTDATA").is_some();
    let outcome = script::run(&path.display().to_string(), &text, update, step);
    if update {
        std::fs::write(path, outcome.rewritten).expect("write script");
    } else {
        assert!(
            outcome.diffs.is_empty(),
            "output differs (UPDATE_TESTDATA=1 to regenerate):\n{}",
            outcome.diffs.join("\n\n")
        );
    }
}

/// The scripts in `core/testdata/<dir>` are exactly `names` (sorted): a new file is not
/// silently skipped by a runner that names its scripts one test each.
pub fn assert_all_named(dir: &str, names: &[&str]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(dir);
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.expect("entry").path();
            path.file_stem()
                .expect("name")
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    found.sort();
    assert_eq!(found, names, "scripts in {}", dir.display());
}
