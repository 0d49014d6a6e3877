//! What a release promises about the binaries themselves (issue 38): `--version` names the
//! release, the commit and the format versions; `picketd`'s exit statuses tell the operator (and
//! systemd) what to do, and the unit file's `RestartPreventExitStatus=` lists exactly the ones a
//! restart cannot cure; `generate-docs` writes the man pages and completions the Debian package
//! ships. The package itself is tested by scripts/test-package.

#[path = "support/binaries.rs"]
mod binaries;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use binaries::picketctl_binary;

use picket_server::exit_status::ExitStatus;
use picket_server::version;

fn picketd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_picketd"))
}

fn run(mut command: Command) -> Output {
    command.output().expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("server/ is in the workspace")
        .to_path_buf()
}

/// The commit git says HEAD is, when the workspace is a git checkout.
fn git_head() -> Option<String> {
    let output = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(workspace())
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

#[test]
fn version_names_the_release_the_commit_and_the_format_versions() {
    for (binary, name) in [
        (Path::new(env!("CARGO_BIN_EXE_picketd")), "picketd"),
        (picketctl_binary(), "picketctl"),
    ] {
        let long = run({
            let mut c = Command::new(binary);
            c.arg("--version");
            c
        });
        assert!(long.status.success(), "{long:?}");
        let text = stdout(&long);
        let lines: Vec<&str> = text.lines().collect();
        let release = env!("CARGO_PKG_VERSION");
        assert_eq!(lines[0], format!("{name} {release}"), "{text}");
        assert_ne!(release, "0.1.0", "the crates left 0.1.0");
        let commit = lines[1].strip_prefix("commit: ").expect(&text);
        if let Some(head) = git_head() {
            assert_eq!(commit, head, "built from HEAD: {text}");
        }
        assert_eq!(
            lines[2],
            format!(
                "peer protocol: {} (speaks {} to {})",
                picket_proto::PEER_PROTOCOL_VERSION,
                picket_proto::PEER_PROTOCOL_VERSION_MIN,
                picket_proto::PEER_PROTOCOL_VERSION
            )
        );
        assert_eq!(
            lines[3],
            format!(
                "log segment format: {} (reads {} to {})",
                picket_storage::format::SEGMENT_VERSION_2,
                picket_storage::format::SEGMENT_VERSION_1,
                picket_storage::format::SEGMENT_VERSION_2
            )
        );
        assert_eq!(
            lines[4],
            format!(
                "hard state and snapshot format: {}",
                picket_storage::format::FORMAT_VERSION
            )
        );
        assert_eq!(
            lines[5],
            format!(
                "cluster version: {} (runs logs at {} to {})",
                picket_core::locks::CLUSTER_VERSION,
                picket_core::locks::CLUSTER_VERSION_FIRST,
                picket_core::locks::CLUSTER_VERSION
            )
        );
        let short = run({
            let mut c = Command::new(binary);
            c.arg("-V");
            c
        });
        assert_eq!(
            stdout(&short).trim(),
            format!("{name} {release} ({})", version::commit_short())
        );
    }
}

/// A configuration of a 3-member cluster whose replica 1 keeps its data in `data_dir`; nothing
/// listens on its addresses (the tests below are refused before any port is bound).
fn config(dir: &Path, data_dir: &Path) -> PathBuf {
    let path = dir.join("picket.toml");
    let mut text = format!("node_id = 1\ndata_dir = \"{}\"\n", data_dir.display());
    for id in 1..=3 {
        text.push_str(&format!(
            "[[members]]\nid = {id}\npeer_address = \"127.0.0.1:{}\"\nclient_address = \"127.0.0.1:{}\"\n",
            9 + id,
            19 + id
        ));
    }
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn an_empty_data_directory_without_init_exits_65_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let path = config(dir.path(), &data);
    let refused = run({
        let mut c = picketd();
        c.args(["run", "--config"]).arg(&path);
        c
    });
    assert_eq!(
        refused.status.code(),
        Some(i32::from(ExitStatus::DataDirNeedsOperator.code())),
        "{refused:?}"
    );
    assert_eq!(ExitStatus::DataDirNeedsOperator.code(), 65);
    assert!(stderr(&refused).contains("--init"), "{refused:?}");
    assert!(!data.exists(), "a refused start created {}", data.display());
}

#[test]
fn an_invalid_configuration_exits_78_from_run_and_check_config() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), &dir.path().join("data"));
    let good = run({
        let mut c = picketd();
        c.args(["check-config", "--config"]).arg(&path);
        c
    });
    assert_eq!(good.status.code(), Some(0), "{good:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("node_id = 1", "node_id = 9")).unwrap();
    for command in ["check-config", "run"] {
        let bad = run({
            let mut c = picketd();
            c.args([command, "--config"]).arg(&path);
            c
        });
        assert_eq!(bad.status.code(), Some(78), "{command}: {bad:?}");
        assert!(stderr(&bad).contains("node_id"), "{command}: {bad:?}");
    }
    let missing = run({
        let mut c = picketd();
        c.args(["run", "--config"])
            .arg(dir.path().join("absent.toml"));
        c
    });
    assert_eq!(missing.status.code(), Some(78), "{missing:?}");
    let usage = run({
        let mut c = picketd();
        c.args(["run", "--no-such-flag"]);
        c
    });
    assert_eq!(usage.status.code(), Some(2), "{usage:?}");
}

/// The values of `key=` lines of a unit file's section, split on whitespace.
fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|line| line.trim().strip_prefix(&format!("{key}=")))
        .flat_map(|value| value.split_whitespace().map(str::to_owned))
        .collect()
}

#[test]
fn the_unit_restarts_on_failure_except_where_a_restart_cannot_help() {
    let unit = std::fs::read_to_string(workspace().join("deploy/systemd/picketd.service")).unwrap();
    assert_eq!(unit_values(&unit, "Restart"), ["on-failure"]);
    let mut prevented: Vec<u8> = unit_values(&unit, "RestartPreventExitStatus")
        .iter()
        .map(|code| code.parse().expect("a numeric exit status"))
        .collect();
    prevented.sort_unstable();
    let mut operator_needed: Vec<u8> = ExitStatus::ALL
        .iter()
        .filter(|s| !s.restart_cures() && **s != ExitStatus::Stopped)
        .map(|s| s.code())
        .collect();
    operator_needed.sort_unstable();
    assert_eq!(prevented, operator_needed);
    assert!(prevented.contains(&65), "data lost, operator needed");
    assert_eq!(unit_values(&unit, "User"), ["picket"]);
    assert_eq!(unit_values(&unit, "ProtectSystem"), ["strict"]);
    assert_eq!(unit_values(&unit, "StateDirectory"), ["picket"]);
    assert_eq!(unit_values(&unit, "ReadWritePaths"), Vec::<String>::new());
    assert_eq!(unit_values(&unit, "NoNewPrivileges"), ["yes"]);
    // The data directory the unit makes writable is the one the shipped configuration names.
    let example = std::fs::read_to_string(workspace().join("server/picket.example.toml")).unwrap();
    assert!(
        example
            .lines()
            .any(|l| l.trim() == "data_dir = \"/var/lib/picket\""),
        "server/picket.example.toml must keep data_dir in the unit's StateDirectory"
    );
}

#[test]
fn generate_docs_writes_man_pages_and_completions_of_visible_commands() {
    let dir = tempfile::tempdir().unwrap();
    for (binary, name, sub) in [
        (Path::new(env!("CARGO_BIN_EXE_picketd")), "picketd", "run"),
        (picketctl_binary(), "picketctl", "lock"),
    ] {
        let out = dir.path().join(name);
        let done = run({
            let mut c = Command::new(binary);
            c.arg("generate-docs").arg("--out-dir").arg(&out);
            c
        });
        assert!(done.status.success(), "{done:?}");
        let page = std::fs::read_to_string(out.join("man").join(format!("{name}.1"))).unwrap();
        assert!(page.contains(".TH"), "{page}");
        assert!(
            !page.contains("generate\\-docs"),
            "a hidden command is listed: {page}"
        );
        let sub_page =
            std::fs::read_to_string(out.join("man").join(format!("{name}-{sub}.1"))).unwrap();
        assert!(sub_page.contains(".TH"), "{sub_page}");
        assert!(
            !out.join("man")
                .join(format!("{name}-generate-docs.1"))
                .exists(),
            "a hidden command has a man page"
        );
        let bash =
            std::fs::read_to_string(out.join("completions").join(format!("{name}.bash"))).unwrap();
        assert!(bash.contains(sub), "{bash}");
        assert!(!bash.contains("generate-docs"), "{bash}");
        assert!(out.join("completions").join(format!("_{name}")).exists());
        assert!(out
            .join("completions")
            .join(format!("{name}.fish"))
            .exists());
    }
    let run_page = std::fs::read_to_string(dir.path().join("picketd/man/picketd-run.1")).unwrap();
    assert!(run_page.contains("\\-\\-init"), "{run_page}");
}
