//! The `picketctl` binary the tests run. `picketd` is this package's binary
//! (`CARGO_BIN_EXE_picketd`); `picketctl` is a package of its own (`ctl/`), which cargo builds
//! into the same directory with `cargo build -p picketctl` or a workspace build (`cargo nextest
//! run --workspace` builds it: the picketctl package has integration tests), but not for this
//! package's tests alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The command that builds the binary this file looks for.
const BUILD: &str = "cargo build -p picketctl";

/// `$CARGO_TARGET_DIR/debug/picketctl`, beside this build's picketd, checked once per test
/// binary to be the same build: its `-V` names the same release and commit as picketd's (a
/// picketctl left there by scripts/build-previous, or by a build of another commit, is not).
pub fn picketctl_binary() -> &'static Path {
    static CHECKED: OnceLock<PathBuf> = OnceLock::new();
    CHECKED.get_or_init(|| {
        let picketd = Path::new(env!("CARGO_BIN_EXE_picketd"));
        let picketctl = picketd.with_file_name("picketctl");
        assert!(
            picketctl.is_file(),
            "{} is missing: build it with `{BUILD}` (the server's tests run it, and cargo builds \
             only this package's binaries for them)",
            picketctl.display()
        );
        let ctl = short_version(&picketctl);
        let d = short_version(picketd);
        assert_eq!(
            ctl.strip_prefix("picketctl "),
            d.strip_prefix("picketd "),
            "{} says `{ctl}` and {} says `{d}`: not the same build; rebuild it with `{BUILD}`",
            picketctl.display(),
            picketd.display()
        );
        picketctl
    })
}

/// What `binary -V` prints, trimmed.
fn short_version(binary: &Path) -> String {
    let output = Command::new(binary)
        .arg("-V")
        .output()
        .unwrap_or_else(|e| panic!("{} -V: {e}", binary.display()));
    assert!(
        output.status.success(),
        "{} -V: {output:?}",
        binary.display()
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}
