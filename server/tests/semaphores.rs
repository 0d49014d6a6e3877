//! End-to-end: counting semaphores (issue 15), through the Rust client library and `picketctl`
//! against three real `picketd` processes. `picketctl semaphore set` declares a key with 2
//! permits; two sessions (one of them `picketctl lock --permit`) hold distinct slots while a
//! third queues; a release hands the freed slot to the waiter, and a `FencingGate` fencing per
//! slot refuses the superseded holder of that slot; lowering N keeps the holders and grants
//! nothing until fewer than N hold; a two-person force-release of one holder raises its slot's
//! floor; `picketctl inspect` shows N, the slots and their floors.
#![cfg(not(madsim))]

mod support;

use std::time::Duration;

use picket_client::fencing::{FencingError, FencingGate};
use picket_client::{Client, ClientConfig, ClientError};
use picket_proto::proto;
use support::*;

const NS: &str = "jobs";
const KEY: &str = "render-pool";
/// The roles every picketctl call of these tests claims.
const ROLES: &str = "class-admin,on-call";
const ELECTION: Duration = Duration::from_secs(10);

/// (session, token, slot) of every holder, oldest first.
fn holders(info: &proto::KeyInfo) -> Vec<(u64, u64, Option<u32>)> {
    info.holders
        .iter()
        .map(|h| (h.session_id, h.token, h.slot))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_take_distinct_slots_and_are_fenced_per_slot() {
    let cluster = Cluster::start();
    let watched = cluster.key_at(cluster.leader(ELECTION).await, NS, KEY);
    let hold = HoldUntilStopped::new();
    let slot_file = hold.file("slot");

    // A permit of a key that is no semaphore is refused by rule.
    let a = cluster.session("worker-a").await;
    let refused = a.try_acquire_permit(NS, KEY).await.unwrap_err();
    assert_eq!(refused.rule(), Some("not_a_semaphore"), "{refused}");

    // The operator declares 2 permits.
    let set = ctl_set_permits(&cluster, "2", "two render workers").await;
    assert_eq!(set["previous_permits"], 0, "{set}");
    assert_eq!(set["permits"], 2, "{set}");
    // An exclusive lock of the semaphore is refused: never silently shared.
    let refused = a.try_lock(NS, KEY).await.unwrap_err();
    assert_eq!(refused.rule(), Some("key_is_semaphore"), "{refused}");

    // Two holders in distinct slots: the client library and picketctl lock --permit.
    let permit_a = a.acquire_permit(NS, KEY).await.unwrap();
    assert_eq!(permit_a.slot(), Some(0));
    let script = hold.script(&format!(
        "echo \"$PICKET_SLOT\" > '{}'; ",
        slot_file.display()
    ));
    let mut ctl_holder = cluster
        .picketctl_as(
            "svc",
            ROLES,
            &["lock", "--permit", NS, KEY, "--", "sh", "-c", &script],
        )
        .spawn()
        .unwrap();
    let info = watched
        .until("two permits held", |i| i.holders.len() == 2)
        .await;
    assert_eq!(info.permits, Some(2));
    assert_eq!(info.mode, proto::LockMode::Permit as i32);
    let ctl_hold = info.holders[1].clone();
    assert_eq!(ctl_hold.slot, Some(1), "distinct slots");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&slot_file).map_or(true, |s| s.trim().is_empty()) {
        assert!(tokio::time::Instant::now() < deadline, "CMD ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(std::fs::read_to_string(&slot_file).unwrap().trim(), "1");

    // The resource fences per slot.
    let gate = FencingGate::new(64);
    let fence_key = format!("{NS}/{KEY}");
    gate.check_slot(&fence_key, 0, permit_a.token()).unwrap();
    gate.check_slot(&fence_key, 1, proto_token(ctl_hold.token))
        .unwrap();

    // A third session queues; busy without waiting.
    let c = cluster.session("worker-c").await;
    assert!(matches!(
        c.try_acquire_permit(NS, KEY).await,
        Err(ClientError::Held { .. })
    ));
    assert_busy(cluster.picketctl_as(
        "svc",
        ROLES,
        &["lock", "--permit", "--no-wait", NS, KEY, "--", "true"],
    ))
    .await;
    let waiting = tokio::spawn({
        let c = c.clone();
        async move { c.acquire_permit(NS, KEY).await }
    });
    watched
        .until("c queues", |i| {
            i.waiters.iter().map(|w| w.session_id).collect::<Vec<_>>() == vec![c.id()]
        })
        .await;

    // a's permit frees: c gets slot 0 with a token above a's.
    let a_token = permit_a.token();
    permit_a.release().await.unwrap();
    let permit_c = joined(waiting, "c is granted").await;
    assert_eq!(permit_c.slot(), Some(0), "the freed slot");
    assert!(permit_c.token() > a_token);
    // The new holder of slot 0 writes; the superseded one is refused; slot 1 is not.
    gate.check_slot(&fence_key, 0, permit_c.token()).unwrap();
    assert!(matches!(
        gate.check_slot(&fence_key, 0, a_token),
        Err(FencingError::StaleSlot { slot: 0, .. })
    ));
    gate.check_slot(&fence_key, 1, proto_token(ctl_hold.token))
        .unwrap();

    // picketctl inspect shows N, every holder's slot and the slot floors.
    let shown = json_of(cluster.picketctl_as("svc", ROLES, &["--json", "inspect", NS, KEY])).await;
    assert_eq!(shown["permits"], 2, "{shown}");
    assert_eq!(shown["mode"], "permit", "{shown}");
    let slots: Vec<u64> = each(&shown["holders"], |h| h["slot"].as_u64().unwrap());
    assert_eq!(
        slots,
        vec![1, 0],
        "oldest first: the picketctl holder, then c"
    );
    assert_eq!(
        shown["slot_floors"][0]["floor"],
        permit_c.token().0,
        "{shown}"
    );
    let human = cluster
        .picketctl_as("svc", ROLES, &["inspect", NS, KEY])
        .output()
        .await
        .unwrap();
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains("semaphore: 2 permits, 2 held"), "{human}");

    // Lowering N to 1 keeps both holders; a new request waits until fewer than 1 hold.
    let mut admin_config = ClientConfig::new(cluster.endpoints.clone(), "ops");
    admin_config.session_ttl = Some(Duration::from_secs(10));
    admin_config.credentials = dev_credentials("carol", "class-admin");
    let admin = Client::new(admin_config).unwrap();
    let lowered = set_semaphore(&admin, 1, "one GPU left").await.unwrap();
    assert_eq!(lowered.previous_permits, 2);
    assert!(lowered.revision > 0);
    // Issue 33: a missing reason was refused in the log (`text_empty`, a revision taken); it is
    // refused at the edge, as api.md says, and changes nothing.
    let unexplained = set_semaphore(&admin, 3, " ").await;
    match unexplained {
        Err(ClientError::Refused { refusal, .. }) => {
            assert_eq!(
                (refusal.rule.as_str(), refusal.field.as_str()),
                ("invalid_argument", "set_semaphore.reason"),
                "{refusal:?}"
            );
        }
        other => panic!("a SetSemaphore without a reason: {other:?}"),
    }
    let unchanged = set_semaphore(&admin, 1, "one GPU left").await.unwrap();
    assert_eq!(unchanged.previous_permits, 1, "the refusal changed nothing");
    let d = cluster.session("worker-d").await;
    let d_waiting = tokio::spawn({
        let d = d.clone();
        async move { d.acquire_permit(NS, KEY).await }
    });
    let info = watched.until("d queues", |i| i.waiters.len() == 1).await;
    assert_eq!(info.permits, Some(1));
    assert_eq!(info.holders.len(), 2, "lowering N takes no permit away");

    // Two-person force-release of c (by session and token): one holder is left, N is 1, so d
    // still waits; slot 0's floor is the release.
    let token_arg = permit_c.token().0.to_string();
    let session_arg = c.id().to_string();
    let reason = "render job wedged";
    let mut request = force_release_args(NS, KEY, &token_arg, reason, &["--session", &session_arg]);
    request.extend(CHECKLIST_ANSWERED);
    let requested =
        json_of(cluster.picketctl_as("alice", ROLES, &[&["--json"][..], &request].concat())).await;
    let id = requested["force_release_id"].as_u64().unwrap().to_string();
    let approved = json_of(cluster.picketctl_as(
        "bob",
        ROLES,
        &[
            "--json",
            "force-release",
            "approve",
            &id,
            "--ack",
            "advisory",
        ],
    ))
    .await;
    assert_eq!(approved["released_token"], permit_c.token().0, "{approved}");
    let floor = approved["floor"].as_u64().unwrap();
    let info = watched.until("c released", |i| i.holders.len() == 1).await;
    assert_eq!(
        holders(&info),
        vec![(ctl_hold.session_id, ctl_hold.token, Some(1))]
    );
    assert!(
        info.slot_floors
            .iter()
            .any(|f| f.slot == 0 && f.floor == floor),
        "{info:?}"
    );
    assert!(!d_waiting.is_finished(), "1 holder of 1 permit: d waits");

    // The picketctl holder ends: d is granted slot 0 (the only slot below N).
    hold.stop();
    exits_successfully(&mut ctl_holder).await;
    let permit_d = joined(d_waiting, "d is granted").await;
    assert_eq!(permit_d.slot(), Some(0));
    assert!(permit_d.token().0 > floor);
    gate.check_slot(&fence_key, 0, permit_d.token()).unwrap();
    assert!(matches!(
        gate.check_slot(&fence_key, 0, permit_c.token()),
        Err(FencingError::StaleSlot { .. })
    ));
    permit_d.release().await.unwrap();

    // Free again, the declaration stays until removed.
    let removed = ctl_set_permits(&cluster, "0", "done").await;
    assert_eq!(removed["previous_permits"], 1, "{removed}");
    let info = inspect(&watched.endpoint, NS, KEY, false).await.unwrap();
    assert_eq!(info.permits, None);
}

fn proto_token(token: u64) -> picket_core::locks::Token {
    picket_core::locks::Token(token)
}

/// `picketctl --json semaphore set` of the test's key, as carol: its JSON answer.
async fn ctl_set_permits(cluster: &Cluster, permits: &str, reason: &str) -> serde_json::Value {
    let args = [
        "--json",
        "semaphore",
        "set",
        NS,
        KEY,
        "--permits",
        permits,
        "--reason",
        reason,
    ];
    json_of(cluster.picketctl_as("carol", ROLES, &args)).await
}

/// `SetSemaphore` of the test's key, as `admin`.
async fn set_semaphore(
    admin: &Client,
    permits: u32,
    reason: &str,
) -> Result<proto::SetSemaphoreResponse, ClientError> {
    admin
        .set_semaphore(proto::SetSemaphoreRequest {
            namespace: NS.into(),
            key: KEY.into(),
            permits,
            reason: reason.into(),
        })
        .await
}
