//! `probe-commit` end to end for a fraction of a second: it completes operations, and leaves
//! no process and no file behind. (What it measures is a figure, not asserted here.)

use std::path::Path;
use std::process::Command;

/// Runs the probe with `clients` into `data_dir`; answers its stdout and stderr.
fn probe(clients: usize, data_dir: &Path) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_picket-bench"))
        .args(["--workload", "probe-commit", "--label", "commit-smoke"])
        .args(["--clients", &clients.to_string()])
        .args(["--warmup-s", "0.1", "--duration-s", "0.3"])
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .expect("picket-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    (stdout, stderr)
}

/// The number after `key=` in `text`.
fn value<'a>(text: &'a str, key: &str) -> &'a str {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        + key.len();
    text[at..].split([' ', '\n']).next().unwrap()
}

fn assert_completes_and_cleans_up(clients: usize) {
    let data_dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("probe-commit-smoke-c{clients}"));
    std::fs::create_dir_all(&data_dir).unwrap();
    let (stdout, stderr) = probe(clients, &data_dir);

    let fields: Vec<&str> = stdout.split_whitespace().collect();
    assert_eq!(
        fields.len(),
        5,
        "probe <label> <per_s> <p50_ms> <p99_ms>: {stdout}"
    );
    assert_eq!(&fields[..2], ["probe", "commit-smoke"]);
    let per_s: f64 = fields[2].parse().unwrap();
    assert!(per_s > 0.0, "no operation completed: {stdout} {stderr}");
    let counted: u64 = value(&stderr, "counted=").parse().unwrap();
    assert!(counted > 0, "{stderr}");
    assert_eq!(value(&stderr, "clients="), clients.to_string());

    // The three processes are gone (killed and reaped; a PID reused since would not be ours).
    let followers = value(&stderr, "followers=");
    let leader = value(&stderr, "leader=");
    let pids: Vec<&str> = followers.split(',').chain([leader]).collect();
    assert_eq!(pids.len(), 3, "{stderr}");
    for pid in pids {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&cmdline).contains("probe-commit"),
            "process {pid} of the probe is still running"
        );
    }
    // Its directory and the logs in it are removed.
    let left: Vec<_> = std::fs::read_dir(&data_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    std::fs::remove_dir(&data_dir).unwrap();
}

#[test]
fn serial_commits_complete_and_leave_nothing_behind() {
    assert_completes_and_cleans_up(1);
}

#[test]
fn group_commits_complete_and_leave_nothing_behind() {
    assert_completes_and_cleans_up(8);
}

#[test]
fn a_role_process_exits_when_its_parent_closes_its_stdin() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let data_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("probe-commit-orphan");
    std::fs::create_dir_all(&data_dir).unwrap();
    let mut follower = Command::new(env!("CARGO_BIN_EXE_picket-bench"))
        .args([
            "--workload",
            "probe-commit",
            "--role",
            "follower",
            "--data-dir",
        ])
        .arg(&data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(follower.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("port "), "{line:?}");
    // What a parent killed by SIGKILL leaves: its end of the pipe closed, nothing else.
    drop(follower.stdin.take());
    let status = follower.wait().unwrap();
    assert!(status.success(), "{status:?}");
    std::fs::remove_dir_all(&data_dir).unwrap();
}
