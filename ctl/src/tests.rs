//! picketctl: argument parsing, help, JSON shapes, TLS flags, lock flags and the backup file
//! (the approval against a fake Admin service is in approve_tests.rs).

use clap::{CommandFactory, Parser};
use picket_proto::proto::{self};

use super::approve_tests::fake_admin;
use super::render;
use super::{Cli, Command, CtlError, ForceRelease, LockArgs};

#[test]
fn the_cli_is_well_formed_and_help_names_every_command() {
    Cli::command().debug_assert();
    let help = Cli::command().render_long_help().to_string();
    for command in [
        "session",
        "lock",
        "unlock",
        "inspect",
        "holds",
        "watch",
        "classes",
        "audit",
        "force-release",
        "semaphore",
        "cluster",
    ] {
        assert!(help.contains(command), "help lacks {command}:\n{help}");
    }
    assert!(help.contains("PICKET_ENDPOINTS"), "{help}");
    let mut force = Cli::command();
    let approve_help = force
        .find_subcommand_mut("force-release")
        .and_then(|c| c.find_subcommand_mut("approve"))
        .expect("force-release approve exists")
        .render_long_help()
        .to_string();
    assert!(
        approve_help.contains("--ack <ACK>") && approve_help.contains("advisory"),
        "{approve_help}"
    );
}

#[test]
fn lock_takes_the_command_after_the_double_dash() {
    let cli = Cli::try_parse_from([
        "picketctl",
        "--json",
        "lock",
        "orders",
        "invoice/42",
        "--",
        "sh",
        "-c",
        "exit 3",
    ])
    .unwrap();
    assert!(cli.global.json);
    match cli.command {
        Command::Lock(LockArgs {
            namespace,
            key,
            command,
            no_wait,
            ..
        }) => {
            assert_eq!((namespace.as_str(), key.as_str()), ("orders", "invoice/42"));
            assert_eq!(command, ["sh", "-c", "exit 3"]);
            assert!(!no_wait);
        }
        other => panic!("parsed as {other:?}"),
    }
}

#[test]
fn endpoints_default_to_picketd_dev_and_split_on_commas() {
    let cli = Cli::try_parse_from(["picketctl", "holds", "orders"]).unwrap();
    if std::env::var_os("PICKET_ENDPOINTS").is_none() {
        assert_eq!(
            cli.global.endpoints,
            ["127.0.0.1:7401", "127.0.0.1:7402", "127.0.0.1:7403"]
        );
    }
    let cli =
        Cli::try_parse_from(["picketctl", "--endpoints", "a:1,b:2", "holds", "orders"]).unwrap();
    assert_eq!(cli.global.endpoints, ["a:1", "b:2"]);
}

#[test]
fn force_release_request_needs_a_token_and_a_reason() {
    let missing = Cli::try_parse_from(["picketctl", "force-release", "request", "orders", "k"]);
    assert!(missing.is_err());
    let cli = Cli::try_parse_from([
        "picketctl",
        "force-release",
        "request",
        "orders",
        "k",
        "--token",
        "7",
        "--reason",
        "hung",
        "--revoke-session",
    ])
    .unwrap();
    assert!(matches!(
        cli.command,
        Command::ForceRelease(ForceRelease::Request {
            token: 7,
            revoke_session: true,
            ..
        })
    ));
}

#[test]
fn classes_lists_or_puts() {
    let list = Cli::try_parse_from(["picketctl", "classes", "orders"]).unwrap();
    assert!(matches!(
        list.command,
        Command::Classes {
            namespace: Some(_),
            action: None
        }
    ));
    let put = Cli::try_parse_from([
        "picketctl",
        "classes",
        "put",
        "orders",
        "--name",
        "ledger",
        "--prefix",
        "ledger/",
        "--fenced",
    ])
    .unwrap();
    assert!(matches!(
        put.command,
        Command::Classes {
            action: Some(_),
            ..
        }
    ));
}

#[test]
fn inspect_json_has_the_fields_an_operator_needs() {
    let info = proto::KeyInfo {
        revision: 40,
        namespace: "orders".into(),
        key: "invoice/42".into(),
        class: Some(proto::ClassSpec {
            name: "ledger".into(),
            fenced: true,
            runbook_url: "https://runbooks.invalid/stuck-lock".into(),
            ..Default::default()
        }),
        holder: Some(proto::HoldInfo {
            namespace: "orders".into(),
            key: "invoice/42".into(),
            session_id: 9,
            identity: Some(proto::Identity {
                name: "billing".into(),
                ..Default::default()
            }),
            token: 31,
            held_for_ms: 120_000,
            session_remaining_ms: Some(4_000),
            ..Default::default()
        }),
        queue_depth: 2,
        floor: Some(12),
        ..Default::default()
    };
    let report = render::key_info(&info);
    let json = &report.json;
    assert_eq!(json["fenced"], true);
    assert_eq!(json["holder"]["token"], 31);
    assert_eq!(json["holder"]["session_id"], 9);
    assert_eq!(json["holder"]["held_for_ms"], 120_000);
    assert_eq!(json["holder"]["identity"]["name"], "billing");
    assert_eq!(json["queue_depth"], 2);
    assert_eq!(json["floor"], 12);
    assert!(report.human.contains("FENCED"), "{}", report.human);
    assert!(report.human.contains("token:    31"), "{}", report.human);
    assert!(
        report
            .human
            .contains("runbook:  https://runbooks.invalid/stuck-lock"),
        "{}",
        report.human
    );
    assert_eq!(
        json["class"]["runbook_url"],
        "https://runbooks.invalid/stuck-lock"
    );
    // A free key: holder is null, not missing.
    let free = render::key_info(&proto::KeyInfo::default());
    assert!(free.json["holder"].is_null());
    assert!(free.human.contains("free"));
    assert!(!free.human.contains("runbook"));
}

#[test]
fn tls_flags_read_the_files_and_a_certificate_needs_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let cert = dir.path().join("me.pem");
    let key = dir.path().join("me.key");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(
        &cert,
        "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(
        &key,
        "-----BEGIN PRIVATE KEY-----\nMIID\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let cli = Cli::try_parse_from([
        "picketctl".to_owned(),
        "--ca".to_owned(),
        path(&ca),
        "--cert".to_owned(),
        path(&cert),
        "--key".to_owned(),
        path(&key),
        "holds".to_owned(),
        "orders".to_owned(),
    ])
    .unwrap();
    let tls = cli.global.tls().unwrap().expect("TLS is on");
    assert_eq!(
        tls.ca_pem.as_deref(),
        Some(std::fs::read(&ca).unwrap().as_slice())
    );
    assert_eq!(
        tls.key_pem.as_deref(),
        Some(std::fs::read(&key).unwrap().as_slice())
    );
    let plain = Cli::try_parse_from(["picketctl", "holds", "orders"]).unwrap();
    assert_eq!(plain.global.tls().unwrap(), None);
    let cert_only = Cli::try_parse_from([
        "picketctl".to_owned(),
        "--cert".to_owned(),
        path(&cert),
        "holds".to_owned(),
        "orders".to_owned(),
    ])
    .unwrap();
    let refused = cert_only.global.tls().unwrap_err();
    assert!(refused.to_string().contains("--key"), "{refused}");
    // `--key` before the command is the TLS key; `audit --key` stays the audit's key filter.
    let audit = Cli::try_parse_from([
        "picketctl".to_owned(),
        "--key".to_owned(),
        path(&key),
        "audit".to_owned(),
        "--key".to_owned(),
        "invoice/42".to_owned(),
    ])
    .unwrap();
    assert_eq!(audit.global.key.as_deref(), Some(key.as_path()));
    assert!(matches!(audit.command, Command::Audit { key: Some(ref k), .. } if k == "invoice/42"));
    let help = Cli::command().render_long_help().to_string();
    for word in [
        "--ca",
        "--cert",
        "--key",
        "PICKET_CA",
        "PICKET_CERT",
        "PICKET_KEY",
    ] {
        assert!(help.contains(word), "help lacks {word}:\n{help}");
    }
}

#[test]
fn a_tls_mismatch_is_explained_with_the_flag_to_use() {
    let error = CtlError::Client(picket_client::ClientError::Unavailable {
        what: "list_holds",
        attempts: 3,
        elapsed_ms: 1_500,
        last: "https://127.0.0.1:1: Cancelled: transport error: connection closed".into(),
        tls_mismatch: Some(picket_client::TlsMismatch::ClientCertificateRequired),
    });
    assert!(error.hint().unwrap().contains("--cert"));
    let json = render::error_json(&error);
    assert!(json["hint"].as_str().unwrap().contains("--key"), "{json}");
    let refused = CtlError::Refused("no".into());
    assert_eq!(refused.hint(), None);
    assert!(render::error_json(&refused).get("hint").is_none());
}
#[test]
fn the_listing_marks_stale_requests_and_says_who_asked_with_what_role() {
    let request = proto::ForceReleaseInfo {
        id: 5,
        namespace: "orders".into(),
        key: "invoice/42".into(),
        token: 31,
        requester: "alice".into(),
        requester_roles: vec![proto::Role::OnCall as i32],
        fenced: true,
        fenced_now: Some(false),
        holder_changed: true,
        expires_at_ms: 1_764_583_445_000,
        ..Default::default()
    };
    let report = render::force_release_list(&[request]);
    for part in [
        "alice (picket-operator)",
        "STALE: the key's holder or token changed",
        "STALE: the class is advisory now (was fenced)",
        "expires 2025-12-01T10:04:05.000Z",
    ] {
        assert!(
            report.human.contains(part),
            "lacks {part:?}:\n{}",
            report.human
        );
    }
    assert_eq!(report.json["requests"][0]["holder_changed"], true);
    assert_eq!(report.json["requests"][0]["fenced_now"], false);
}

/// Issue 16, finding 6: the audit text had no time, fenced flag, roles, floor or next holder.
#[test]
fn the_audit_text_shows_time_kind_people_roles_floor_next_and_revocation() {
    let record = proto::AuditRecord {
        revision: 50,
        time_ms: 1_764_583_445_123,
        actor: "bob".into(),
        actor_roles: vec![proto::Role::IncidentCommander as i32],
        action: proto::AuditAction::ForceReleaseApproved as i32,
        namespace: "orders".into(),
        key: "invoice/42".into(),
        token: Some(31),
        fenced: Some(false),
        session_id: Some(9),
        force_release_id: Some(40),
        reason: "INC-7".into(),
        requester: "alice".into(),
        requester_roles: vec![proto::Role::OnCall as i32],
        floor: Some(50),
        next: Some(proto::Grant {
            session_id: 12,
            token: 50,
        }),
        revoke_session: Some(false),
        previous_permits: None,
        permits: None,
        slot: None,
        membership: String::new(),
        checklist: None,
        holder: None,
    };
    let report = render::audit(&proto::QueryAuditResponse {
        records: vec![record],
        compacted_through: 0,
    });
    for part in [
        "rev 50 2025-12-01T10:04:05.123Z force-release approved orders/invoice/42",
        "by bob (picket-incident-commander)",
        "requested by alice (picket-operator)",
        "token 31 of session 9",
        "advisory",
        "floor 50",
        "next holder session 12 token 50",
        "revoke session: no",
        "reason \"INC-7\"",
    ] {
        assert!(
            report.human.contains(part),
            "lacks {part:?}:\n{}",
            report.human
        );
    }
    assert_eq!(report.json["records"][0]["requester"], "alice");
    assert_eq!(report.json["records"][0]["floor"], 50);
}

#[test]
fn watch_text_shows_log_time_and_who() {
    let event = proto::Event {
        revision: 7,
        time_ms: 0,
        namespace: "orders".into(),
        key: "k".into(),
        identity: Some(proto::Identity {
            name: "batch".into(),
            host: "web-1".into(),
            pid: 4242,
            principal: "svc".into(),
        }),
        kind: Some(proto::event::Kind::Granted(proto::event::Granted {
            session_id: 3,
            token: 7,
            mode: 0,
            slot: None,
        })),
    };
    let words = render::event_words(&event);
    assert_eq!(
        words,
        "rev 7        1970-01-01T00:00:00.000Z orders/k granted to session 3 with token 7 — batch@web-1 pid 4242 (svc)"
    );
    assert_eq!(render::event_json(&event)["identity"]["pid"], 4242);
}

#[test]
fn lock_flags_parse_durations_and_watch_starts_now_by_default() {
    let cli = Cli::try_parse_from([
        "picketctl",
        "lock",
        "orders",
        "k",
        "--timeout",
        "2s",
        "--kill-grace",
        "500ms",
        "--name",
        "nightly",
        "--",
        "true",
    ])
    .unwrap();
    match cli.command {
        Command::Lock(LockArgs {
            timeout,
            kill_grace,
            name,
            ..
        }) => {
            assert_eq!(timeout, Some(std::time::Duration::from_secs(2)));
            assert_eq!(kill_grace, Some(std::time::Duration::from_millis(500)));
            assert_eq!(name.as_deref(), Some("nightly"));
        }
        other => panic!("{other:?}"),
    }
    let bad = Cli::try_parse_from(["picketctl", "lock", "orders", "k", "--timeout", "soon"]);
    assert!(bad.unwrap_err().to_string().contains("not a duration"));
    let cli = Cli::try_parse_from(["picketctl", "watch", "orders"]).unwrap();
    assert!(matches!(cli.command, Command::Watch { from: None, .. }));
    // Distinct exit statuses, documented in --help.
    let codes = [
        super::EXIT_ERROR,
        super::EXIT_REFUSED,
        super::EXIT_LOCK_LOST,
        super::EXIT_TIMED_OUT,
        super::EXIT_BUSY,
        super::EXIT_UNREACHABLE,
    ];
    let distinct: std::collections::BTreeSet<_> = codes.iter().collect();
    assert_eq!(distinct.len(), codes.len());
    let mut command = Cli::command();
    let help = command
        .find_subcommand_mut("lock")
        .unwrap()
        .render_long_help()
        .to_string();
    for part in [
        "3 lock lost",
        "4 wait timed out",
        "5 busy",
        "6 unreachable",
        "--kill-grace",
    ] {
        assert!(help.contains(part), "lock --help lacks {part:?}:\n{help}");
    }
}

/// `lock --timeout` is a server-side wait deadline (1 ms to one day): outside that range it is
/// refused by picketctl (exit 2) before anything is sent (the endpoint listens nowhere: a call
/// would end unreachable, exit 6).
#[tokio::test]
async fn lock_refuses_a_wait_timeout_the_server_would_not_take_before_any_call() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    drop(listener);
    for timeout in ["0ms", "1441m"] {
        let cli = Cli::try_parse_from([
            "picketctl",
            "--endpoints",
            &endpoint,
            "--retry-ms",
            "200",
            "lock",
            "orders",
            "k",
            "--ttl-ms",
            "5000",
            "--timeout",
            timeout,
            "--",
            "true",
        ])
        .unwrap();
        let error = super::execute(cli).await.unwrap_err();
        assert_eq!(error.exit(), super::EXIT_REFUSED, "{timeout}: {error}");
        assert!(
            error
                .to_string()
                .contains("a wait deadline is 1 ms to one day"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn a_broken_backup_stream_writes_nothing_and_keeps_the_old_file() {
    let (client, _) = fake_admin(true).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("backup.pkbk");
    std::fs::write(&file, b"the previous backup").unwrap();
    let error = super::snapshot::save(&client, &file).await.unwrap_err();
    assert!(error.to_string().contains("nothing was written"), "{error}");
    assert_eq!(std::fs::read(&file).unwrap(), b"the previous backup");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "a temp file was left: {names:?}");
}

/// Every `picketctl` command of the restore runbook parses as written (an outside test walks
/// the runbook literally).
#[test]
fn the_restore_runbooks_picketctl_commands_parse() {
    let runbook = include_str!("../../docs/runbooks/restore-from-backup.md");
    let mut in_block = false;
    let mut seen = 0;
    for line in runbook.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block || !line.starts_with("picketctl ") {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Err(error) = Cli::try_parse_from(&words) {
            panic!("`{line}` does not parse: {error}");
        }
        seen += 1;
    }
    assert!(seen >= 6, "only {seen} picketctl commands found");
}

/// The `--wait` flags of `picketctl cluster ARGS...`.
fn wait_flags(args: &[&str]) -> super::WaitInEffect {
    use super::ClusterAction;
    let argv = ["picketctl", "cluster"].iter().chain(args).copied();
    match Cli::try_parse_from(argv).unwrap().command {
        Command::Cluster(
            ClusterAction::Add { wait, .. }
            | ClusterAction::Promote { wait, .. }
            | ClusterAction::Remove { wait, .. },
        ) => wait,
        other => panic!("{other:?}"),
    }
}

#[test]
fn membership_changes_wait_only_when_asked_and_for_60s_by_default() {
    let minute = std::time::Duration::from_secs(60);
    let wait = wait_flags(&["remove", "1", "--reason", "x"]);
    assert!(!wait.wait);
    let wait = wait_flags(&["remove", "1", "--reason", "x", "--wait"]);
    assert!(wait.wait);
    assert_eq!(wait.wait_timeout, minute);
    let wait = wait_flags(&[
        "promote",
        "4",
        "--reason",
        "x",
        "--wait",
        "--wait-timeout",
        "2m",
    ]);
    assert_eq!(wait.wait_timeout, 2 * minute);
    // A time box without --wait is a mistake, not silently ignored.
    let bad = Cli::try_parse_from([
        "picketctl",
        "cluster",
        "remove",
        "1",
        "--reason",
        "x",
        "--wait-timeout",
        "5s",
    ]);
    assert!(bad.unwrap_err().to_string().contains("--wait"));
}
