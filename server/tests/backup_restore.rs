//! Backups and restores against real `picketd` processes (issue 37): locks taken with a fenced
//! resource accepting their tokens; a backup saved; more locks; every replica's data destroyed;
//! the cluster restored from the OLDER backup; the restored cluster's grants accepted by the
//! same resource, none at or below a token it accepted before. Bad backup files are refused by
//! name and change nothing.
#![cfg(not(madsim))]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use picket_client::FencingGate;
use picket_core::locks::Token;
use support::*;

const NS: &str = "orders";
const ELECTION: Duration = Duration::from_secs(10);
const ADMIN: (&str, &str) = ("alice", "picket-admin");

/// Takes and releases `key` once with `session`: the token, after the gate accepted it.
async fn lock_once(
    endpoints: &[String],
    gate: &FencingGate,
    at: &str,
    session: u64,
    request: u64,
    key: &str,
) -> u64 {
    let response = acquire(at, session, request, NS, key, 0).await.unwrap();
    let token = granted(&response).expect("granted");
    gate.check(&format!("{NS}/{key}"), Token(token))
        .unwrap_or_else(|e| panic!("the resource refused a fresh grant: {e}"));
    release(at, session, request + 1, NS, key, token)
        .await
        .unwrap();
    let _ = endpoints;
    token
}

fn picketd(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_picketd"))
        .args(args)
        .output()
        .unwrap()
}

fn picketctl_offline(args: &[&str]) -> std::process::Output {
    Command::new(picketctl_binary())
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Replaces the cluster id of a configuration file (the restore makes a NEW cluster).
fn rename_cluster(config: &Path, to: &str) -> PathBuf {
    let text = std::fs::read_to_string(config).unwrap();
    let renamed = text.replacen("cluster_id = \"e2e\"", &format!("cluster_id = \"{to}\""), 1);
    assert_ne!(text, renamed);
    let path = config.with_extension(format!("{to}.toml"));
    std::fs::write(&path, renamed).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_from_an_older_backup_never_rewinds_a_token() {
    let mut cluster = Cluster::start();
    let leader = cluster.leader(ELECTION).await;
    let at = cluster.endpoints[leader].clone();
    let gate = FencingGate::new(1_000);
    let mut accepted = Vec::new();

    let session = create_session(&at, "writer", 30_000).await;
    for (i, key) in ["a", "b", "c"].iter().enumerate() {
        accepted.push(
            lock_once(
                &cluster.endpoints,
                &gate,
                &at,
                session,
                10 + 2 * i as u64,
                key,
            )
            .await,
        );
    }
    // A hold that is live when the backup is taken.
    let held = acquire(&at, session, 50, NS, "held", 0).await.unwrap();
    let held_token = granted(&held).unwrap();
    gate.check(&format!("{NS}/held"), Token(held_token))
        .unwrap();
    accepted.push(held_token);

    // Without the role, no backup.
    let backup = cluster.dir.path().join("backup.pkbk");
    let backup_arg = backup.to_str().unwrap();
    let refused = cluster
        .picketctl_as("bob", "on-call", &["snapshot", "save", backup_arg])
        .output()
        .await
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("missing_role"),
        "{}",
        text(&refused)
    );
    assert!(!backup.exists());

    let saved = cluster
        .picketctl_as(
            ADMIN.0,
            ADMIN.1,
            &["--json", "snapshot", "save", backup_arg],
        )
        .output()
        .await
        .unwrap();
    assert!(saved.status.success(), "{}", text(&saved));
    let saved: serde_json::Value = serde_json::from_slice(&saved.stdout).unwrap();
    assert_eq!(saved["cluster_id"], "e2e");
    assert_eq!(saved["held_keys"], 1);
    let backup_revision = saved["revision"].as_u64().unwrap();
    assert!(backup_revision >= held_token);
    // The save is in the replicated audit trail, with who took it (the file holds every
    // session's secret hash), at a revision the backup itself covers.
    let audit = cluster
        .picketctl_as(ADMIN.0, ADMIN.1, &["audit"])
        .output()
        .await
        .unwrap();
    assert!(audit.status.success(), "{}", text(&audit));
    let saves: Vec<String> = text(&audit)
        .lines()
        .filter(|l| l.contains("backup saved"))
        .map(str::to_owned)
        .collect();
    assert_eq!(saves.len(), 1, "{}", text(&audit));
    assert!(saves[0].contains(ADMIN.0), "{}", saves[0]);
    assert!(saves[0].contains("picket-admin"), "{}", saves[0]);
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(&backup).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a backup holds secret hashes: owner only");
    // Offline verification prints the same header.
    let status = picketctl_offline(&["--json", "snapshot", "status", backup_arg]);
    assert!(status.status.success(), "{}", text(&status));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["revision"], backup_revision);
    assert_eq!(status["format_version"], 1);
    assert_eq!(status["members"].as_array().unwrap().len(), 3);

    // More locks after the backup: the resource sees higher tokens the backup knows nothing of.
    for (i, key) in ["a", "b", "c", "d"].iter().enumerate() {
        accepted.push(
            lock_once(
                &cluster.endpoints,
                &gate,
                &at,
                session,
                100 + 2 * i as u64,
                key,
            )
            .await,
        );
    }
    let accepted_max = *accepted.iter().max().unwrap();
    assert!(accepted_max > backup_revision);

    // The whole cluster is lost: every replica and every byte of its data, but for one old
    // data directory that survived, moved aside (the restore reads it, read only).
    for i in 0..3 {
        cluster.kill(i);
    }
    let survivor = cluster.dir.path().join("node-1.old");
    std::fs::rename(cluster.dir.path().join("node-1"), &survivor).unwrap();
    for i in 1..3 {
        std::fs::remove_dir_all(cluster.dir.path().join(format!("node-{}", i + 1))).unwrap();
    }

    // A restore into the old cluster's id is refused, writing nothing.
    let same = picketd(&[
        "restore",
        "--from",
        backup_arg,
        "--config",
        cluster.configs[0].to_str().unwrap(),
    ]);
    assert!(!same.status.success());
    assert!(
        text(&same).contains("restore_same_cluster_id"),
        "{}",
        text(&same)
    );
    assert!(!cluster.dir.path().join("node-1").exists());

    // Restore every replica from the OLDER backup, as a new cluster, offering the survivor.
    let old_configs = cluster.configs.clone();
    let mut digests = Vec::new();
    for (i, old_config) in old_configs.iter().enumerate() {
        let config = rename_cluster(old_config, "e2e-restored");
        let out = picketd(&[
            "restore",
            "--from",
            backup_arg,
            "--config",
            config.to_str().unwrap(),
            "--floor-from",
            survivor.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", text(&out));
        let said = text(&out);
        assert!(said.contains("floor source: data directory"), "{said}");
        // The survivor raised the floor above the backup's revision plus the bump.
        let restored: u64 = said
            .split("restored revision ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.trim_start_matches('r').parse().ok())
            .unwrap_or_else(|| panic!("no restored revision in {said}"));
        assert!(restored > backup_revision + (1 << 40), "{said}");
        let digest = said
            .split("state digest ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no digest in {said}"))
            .to_owned();
        digests.push(digest);
        cluster.configs[i] = config;
    }
    assert!(digests.iter().all(|d| *d == digests[0]), "{digests:?}");
    // A restored directory refuses the old cluster's configuration.
    let old = picketd(&["run", "--config", old_configs[0].to_str().unwrap()]);
    assert!(!old.status.success());
    assert!(
        text(&old).contains("restore_cluster_id_mismatch"),
        "{}",
        text(&old)
    );

    for i in 0..3 {
        cluster.spawn_with(i, &[]);
    }
    let leader = cluster.leader(ELECTION).await;
    let at = cluster.endpoints[leader].clone();
    // The hold did not survive the restore, nor did its session.
    let held = inspect(&at, NS, "held", false).await.unwrap();
    assert!(held.holder.is_none(), "{held:?}");
    let answer = keepalive(&at, session).await.unwrap();
    assert!(answer.lost, "{answer:?}");
    let after = create_session(&at, "writer-2", 30_000).await;
    let mut restored_tokens = Vec::new();
    for (i, key) in ["a", "b", "c", "d", "held"].iter().enumerate() {
        let token = lock_once(
            &cluster.endpoints,
            &gate,
            &at,
            after,
            10 + 2 * i as u64,
            key,
        )
        .await;
        restored_tokens.push(token);
    }
    for token in &restored_tokens {
        assert!(
            *token > accepted_max,
            "a restored grant's token {token} is at or below the accepted {accepted_max}"
        );
    }
    // The new cluster's status names it.
    let members = cluster
        .picketctl(&["--json", "cluster", "members"])
        .output()
        .await
        .unwrap();
    let members: serde_json::Value = serde_json::from_slice(&members.stdout).unwrap();
    assert_eq!(members["cluster_id"], "e2e-restored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_backup_files_are_refused_by_rule_and_change_nothing() {
    let (cluster, _, at) = cluster_with_leader(ELECTION).await;
    let session = create_session(&at, "svc", 30_000).await;
    acquire(&at, session, 1, NS, "k", 0).await.unwrap();
    let dir = cluster.dir.path();
    let good = dir.join("good.pkbk");
    let saved = cluster
        .picketctl_as(
            ADMIN.0,
            ADMIN.1,
            &["snapshot", "save", good.to_str().unwrap()],
        )
        .output()
        .await
        .unwrap();
    assert!(saved.status.success(), "{}", text(&saved));
    let bytes = std::fs::read(&good).unwrap();

    let mut flipped = bytes.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x01;
    let mut version = bytes.clone();
    version[8..12].copy_from_slice(&9u32.to_le_bytes());
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "truncated",
            bytes[..bytes.len() - 10].to_vec(),
            "backup_truncated",
        ),
        ("flipped", flipped, "backup_checksum"),
        ("version", version, "backup_format_version"),
        ("empty", Vec::new(), "backup_empty"),
    ];
    let config = rename_cluster(&cluster.configs[0], "e2e-new");
    let new_data = dir.join("node-1");
    let before: Vec<_> = std::fs::read_dir(&new_data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    for (name, content, rule) in cases {
        let file = dir.join(format!("{name}.pkbk"));
        std::fs::write(&file, &content).unwrap();
        let status = picketctl_offline(&["snapshot", "status", file.to_str().unwrap()]);
        assert_eq!(status.status.code(), Some(2), "{name}: {}", text(&status));
        assert!(text(&status).contains(rule), "{name}: {}", text(&status));
        // A restore from it is refused before anything is written (the data directory named
        // by the config is the running replica's own: untouched).
        let restore = picketd(&[
            "restore",
            "--from",
            file.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ]);
        assert!(!restore.status.success(), "{name}");
        assert!(text(&restore).contains(rule), "{name}: {}", text(&restore));
        assert_eq!(
            std::fs::read(&file).unwrap(),
            content,
            "{name}: the file changed"
        );
    }
    let after: Vec<_> = std::fs::read_dir(&new_data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(before, after);
    // A good file into a directory that holds data: refused, naming the rule.
    let busy = picketd(&[
        "restore",
        "--from",
        good.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    assert!(
        text(&busy).contains("restore_data_dir_not_empty"),
        "{}",
        text(&busy)
    );
    // A save over an existing file that fails (no leader reachable) leaves the file as it was.
    let endpoints_gone = tokio::process::Command::new(picketctl_binary())
        .args([
            "--endpoints",
            "127.0.0.1:1",
            "--retry-ms",
            "300",
            "--principal",
            "alice",
            "--roles",
            "picket-admin",
            "snapshot",
            "save",
        ])
        .arg(&good)
        .output()
        .await
        .unwrap();
    assert!(!endpoints_gone.status.success());
    assert_eq!(std::fs::read(&good).unwrap(), bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_backups_are_written_checked_and_pruned() {
    let cluster = Cluster::start_configured(
        false,
        "[backup]\ndir = \"backups\"\ninterval_s = 1\nkeep = 2\n",
    );
    let leader = cluster.leader(ELECTION).await;
    let at = cluster.endpoints[leader].clone();
    let session = create_session(&at, "svc", 30_000).await;
    acquire(&at, session, 1, NS, "k", 0).await.unwrap();
    let dir = cluster.dir.path().join("backups");
    // Every replica writes its own files every second and keeps its newest two.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let files = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        let per_node = |n: u64| {
            files
                .iter()
                .filter(|f| f.to_str().unwrap().contains(&format!("-node{n}-")))
                .count()
        };
        if (1..=3).all(|n| per_node(n) == 2) {
            break files;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no two backups per replica within 20 s: {files:?}\n{}",
            cluster.log(0)
        );
    };
    std::thread::sleep(Duration::from_millis(1_500));
    for n in 1..=3 {
        let mine = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_str()
                    .unwrap()
                    .contains(&format!("-node{n}-"))
            })
            .count();
        assert!(mine <= 2, "replica {n} keeps {mine} backups, keep = 2");
    }
    for file in files.iter().filter(|f| f.exists()) {
        let status = picketctl_offline(&["--json", "snapshot", "status", file.to_str().unwrap()]);
        assert!(status.status.success(), "{}", text(&status));
        let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
        assert_eq!(status["cluster_id"], "e2e");
        assert!(status["revision"].as_u64().unwrap() >= 1);
    }
}

/// `picketd dev --restore FILE`'s path: a dev cluster's backup restored into a new dev cluster
/// (cluster id `picket-dev-r<REVISION>`), whose grants are above every token of the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dev_cluster_restores_from_a_backup_of_another() {
    use picket_server::dev::{
        restore_dev_data, restored_cluster_id, DevCluster, DevOptions, DevPorts,
    };
    let (cluster, _, at) = dev_cluster_with_leader().await;
    let session = create_session(&at, "svc", 30_000).await;
    let first = acquire(&at, session, 1, NS, "k", 0).await.unwrap();
    let first = granted(&first).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dev.pkbk");
    let saved = Command::new(picketctl_binary())
        .args([
            "--endpoints",
            &cluster.client_endpoints().join(","),
            "--principal",
            "alice",
            "--roles",
            "picket-admin",
            "snapshot",
            "save",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(saved.status.success(), "{}", text(&saved));
    let later = acquire(&at, session, 2, NS, "other", 0).await.unwrap();
    let later = granted(&later).unwrap();
    cluster.shutdown().await;

    // The restore records the members' addresses as the new cluster's first membership: the
    // restored cluster starts on the ports it was restored for.
    let free = picket_server::dev::free_ports(9).unwrap();
    let ports = DevPorts {
        client: [free[0], free[1], free[2]],
        peer: [free[3], free[4], free[5]],
        http: [free[6], free[7], free[8]],
    };
    let on_ports = DevOptions {
        ports: Some(ports),
        ..DevOptions::default()
    };
    let data = dir.path().join("restored");
    let restored = restore_dev_data(&on_ports, &data, &file).unwrap();
    assert_eq!(
        restored.cluster_id,
        format!("picket-dev-r{}", restored.revision.0)
    );
    assert_eq!(
        restored_cluster_id(&data),
        Some(restored.cluster_id.clone())
    );
    assert_eq!((restored.sessions_ended, restored.holds_ended), (1, 1));
    // A second restore into the same directory is refused (it holds the first one's data).
    let again = restore_dev_data(&on_ports, &data, &file).unwrap_err();
    assert!(again.contains("restore_data_dir_not_empty"), "{again}");

    let options = DevOptions {
        data_dir: Some(data.clone()),
        cluster_id: restored_cluster_id(&data),
        ..on_ports
    };
    let cluster = DevCluster::start_with(options).await.unwrap();
    let leader = cluster.wait_for_leader(ELECTION).await.expect("a leader");
    let at = cluster.client_endpoint(leader);
    let session = create_session(&at, "svc", 30_000).await;
    let token = granted(&acquire(&at, session, 1, NS, "k", 0).await.unwrap()).unwrap();
    assert!(
        token > restored.revision.0 && token > later && later > first,
        "{token} {later} {first}"
    );
    cluster.shutdown().await;
}
