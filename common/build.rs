//! Embeds the git commit `picketd` and `picketctl` were built from, for `--version`
//! (`PICKET_GIT_COMMIT`, read by `src/version.rs`; picket-server and picketctl both print it).
//!
//! In order: the `PICKET_GIT_COMMIT` environment variable (for a packager building from a
//! source tarball who knows the commit), else `git rev-parse HEAD` when this crate is inside a
//! git checkout of the Picket workspace itself, else `unknown` (a tarball without `.git`, or one
//! unpacked inside some other repository, whose commit would be a lie).
//!
//! The script re-runs when HEAD moves (HEAD, the branch it names, `packed-refs`), so a new commit
//! rebuilds this crate once; other branches' commits do not.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PICKET_GIT_COMMIT");
    let commit = std::env::var("PICKET_GIT_COMMIT")
        .ok()
        .map(|c| c.trim().to_owned())
        .filter(|c| !c.is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=PICKET_GIT_COMMIT={commit}");
}

/// `git` run in `dir`: its trimmed stdout, or `None` when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    Some(text.trim().to_owned())
}

fn git_commit() -> Option<String> {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR")?);
    let workspace = manifest.parent()?.canonicalize().ok()?;
    let top = PathBuf::from(git(&manifest, &["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != workspace {
        return None;
    }
    let git_path = |name: &str| {
        git(
            &manifest,
            &["rev-parse", "--path-format=absolute", "--git-path", name],
        )
        .map(PathBuf::from)
    };
    // A path that does not exist would make cargo re-run the script on every build.
    for path in [git_path("HEAD"), git_path("packed-refs")]
        .into_iter()
        .flatten()
    {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    // A packed branch has no file of its own until its next commit writes one: then watch the
    // directory it will appear in.
    if let Some(branch) = git(&manifest, &["symbolic-ref", "-q", "HEAD"]).and_then(|b| git_path(&b))
    {
        if branch.exists() {
            println!("cargo:rerun-if-changed={}", branch.display());
        } else if let Some(parent) = branch.parent().filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", parent.display());
        }
    }
    let commit = git(&manifest, &["rev-parse", "--verify", "HEAD"])?;
    let is_hash = commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit());
    is_hash.then_some(commit)
}
