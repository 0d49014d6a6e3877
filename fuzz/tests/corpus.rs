//! Replays every committed input of every target (`corpus/<target>/*`: the generated seeds, the
//! inputs fuzzing kept, and the regressions of crashes found), and checks the seeds are current.
//!
//! `UPDATE_CORPUS=1 cargo test --test corpus` rewrites the generated seeds.

use std::fs;
use std::path::{Path, PathBuf};

use picket_fuzz::seeds::seeds;
use picket_fuzz::TARGETS;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

#[test]
fn seeds_are_generated_ones() {
    let update = std::env::var_os("UPDATE_CORPUS").is_some();
    for (target, _) in TARGETS {
        let dir = corpus_dir(target);
        for (name, bytes) in seeds(target) {
            let path = dir.join(&name);
            if update {
                fs::create_dir_all(&dir).unwrap();
                fs::write(&path, &bytes).unwrap();
            } else {
                let committed = fs::read(&path).unwrap_or_else(|e| {
                    panic!("{}: {e} (run with UPDATE_CORPUS=1)", path.display())
                });
                assert!(
                    committed == bytes,
                    "{} is stale (run with UPDATE_CORPUS=1)",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn corpus_replays_without_failure() {
    for (target, run) in TARGETS {
        let dir = corpus_dir(target);
        let mut entries: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        assert!(!entries.is_empty(), "{target}: empty corpus");
        for path in entries {
            let bytes = fs::read(&path).unwrap();
            eprintln!("replaying {}", path.display());
            run(&bytes);
        }
    }
}
