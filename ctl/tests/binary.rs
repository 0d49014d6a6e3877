//! The `picketctl` binary itself, without a cluster: what `main` adds to the library (the
//! shared version text, the exit status and how an error is printed).
//!
//! Also the reason cargo builds `target/debug/picketctl` for `cargo test` and `cargo nextest
//! run --workspace`: a package's binaries are built for its integration tests, and the server's
//! tests run this one (server/tests/support/binaries.rs).

use std::net::TcpListener;
use std::process::{Command, Output};

fn picketctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_picketctl"))
        .args(args)
        .env_remove("PICKET_ENDPOINTS")
        .output()
        .expect("picketctl runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn the_version_is_the_one_picketd_prints() {
    let short = picketctl(&["-V"]);
    assert!(short.status.success(), "{short:?}");
    assert_eq!(
        stdout(&short).trim_end(),
        format!("picketctl {}", picket_common::version::short())
    );
    let long = picketctl(&["--version"]);
    assert!(long.status.success(), "{long:?}");
    assert_eq!(
        stdout(&long).trim_end(),
        format!("picketctl {}", picket_common::version::long())
    );
}

/// A replica that accepts connections and never answers: picketctl gives up after its retry
/// budget with exit status 6, the error as JSON on stdout with --json, on stderr without.
#[test]
fn no_replica_answering_exits_6_with_the_error_on_the_chosen_stream() {
    // Kept bound (never accepted): the port cannot be taken by anyone else meanwhile.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = silent.local_addr().unwrap().to_string();
    let budget = ["--timeout-ms", "200", "--retry-ms", "600"];

    let mut args = vec!["--json", "--endpoints", &endpoint];
    args.extend(budget);
    args.extend(["holds", "orders"]);
    let json = picketctl(&args);
    assert_eq!(json.status.code(), Some(6), "{json:?}");
    let answer: serde_json::Value = serde_json::from_str(stdout(&json).trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {json:?}"));
    let error = answer["error"].as_str().unwrap_or_default();
    assert!(!error.is_empty(), "{answer}");
    assert!(answer["rule"].is_string(), "{answer}");
    assert_eq!(stderr(&json), "", "--json keeps stderr quiet");

    let mut args = vec!["--endpoints", &endpoint];
    args.extend(budget);
    args.extend(["holds", "orders"]);
    let text = picketctl(&args);
    assert_eq!(text.status.code(), Some(6), "{text:?}");
    assert_eq!(stdout(&text), "", "{text:?}");
    assert!(
        stderr(&text).starts_with("picketctl: "),
        "the error names the program: {text:?}"
    );
    drop(silent);
}
