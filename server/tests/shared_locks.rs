//! End-to-end: shared (read) locks (issue 15), through the Rust client library and `picketctl`
//! against three real `picketd` processes. Two shared holders (one of them `picketctl lock
//! --shared`) coexist; an exclusive waiter waits for both and then gets a token above both; a
//! shared request made after the writer queued waits behind it, and `picketctl inspect` lists
//! every holder with its mode.
#![cfg(not(madsim))]

mod support;

use std::time::Duration;

use picket_client::ClientError;
use picket_proto::proto;
use support::*;

const NS: &str = "orders";
const KEY: &str = "catalog/1";
const ELECTION: Duration = Duration::from_secs(10);

fn holders(info: &proto::KeyInfo) -> Vec<(u64, u64)> {
    info.holders
        .iter()
        .map(|h| (h.session_id, h.token))
        .collect()
}

fn waiters(info: &proto::KeyInfo) -> Vec<(u64, i32)> {
    info.waiters
        .iter()
        .map(|w| (w.session_id, w.mode))
        .collect()
}

const SHARED: i32 = proto::LockMode::Shared as i32;
const EXCLUSIVE: i32 = proto::LockMode::Exclusive as i32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_a_writer_waits_for_them_and_later_readers_wait_for_the_writer() {
    let cluster = Cluster::start();
    let watched = cluster.key_at(cluster.leader(ELECTION).await, NS, KEY);
    let hold = HoldUntilStopped::new();

    // Reader 1: the client library.
    let reader = cluster.session("reader").await;
    let read = reader.lock_shared(NS, KEY).await.unwrap();
    // Reader 2: picketctl, holding until told to stop.
    let script = hold.script("");
    let mut ctl_reader = cluster
        .picketctl(&["lock", "--shared", NS, KEY, "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    let info = watched
        .until("two shared holders", |i| i.holders.len() == 2)
        .await;
    assert_eq!(info.mode, SHARED);
    assert!(info.holders.iter().all(|h| h.mode == SHARED));
    assert_eq!(info.holder.as_ref().unwrap().session_id, reader.id());
    let ctl_hold = info.holders[1].clone();
    let read_token = read.token().0;
    assert!(ctl_hold.token > read_token);

    // A writer waits for both readers.
    let writer = cluster.session("writer").await;
    let writing = tokio::spawn({
        let writer = writer.clone();
        async move { writer.lock(NS, KEY).await }
    });
    watched
        .until("the writer queues", |i| {
            waiters(i) == vec![(writer.id(), EXCLUSIVE)]
        })
        .await;
    // A reader after the writer does not overtake it: busy without waiting, queued with.
    let late = cluster.session("late-reader").await;
    assert!(matches!(
        late.try_lock_shared(NS, KEY).await,
        Err(ClientError::Held { .. })
    ));
    assert_busy(cluster.picketctl(&["lock", "--shared", "--no-wait", NS, KEY, "--", "true"])).await;
    let late_reading = tokio::spawn({
        let late = late.clone();
        async move { late.lock_shared(NS, KEY).await }
    });
    watched
        .until("the late reader queues behind", |i| {
            waiters(i) == vec![(writer.id(), EXCLUSIVE), (late.id(), SHARED)]
        })
        .await;

    // picketctl inspect lists every holder with its mode, and the waiters' modes.
    let shown = cluster
        .picketctl(&["--json", "inspect", NS, KEY])
        .output()
        .await
        .unwrap();
    assert!(shown.status.success(), "{shown:?}");
    let json: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(json["mode"], "shared");
    let listed: Vec<(u64, String)> = each(&json["holders"], |h| {
        let mode = h["mode"].as_str().unwrap().to_owned();
        (h["session_id"].as_u64().unwrap(), mode)
    });
    assert_eq!(
        listed,
        vec![
            (reader.id(), "shared".to_owned()),
            (ctl_hold.session_id, "shared".to_owned())
        ]
    );
    assert_eq!(json["waiters"][0]["mode"], "exclusive");
    assert_eq!(json["waiters"][1]["mode"], "shared");
    let human = cluster
        .picketctl(&["inspect", NS, KEY])
        .output()
        .await
        .unwrap();
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains("shared, 2 holders"), "{human}");

    // Both readers leave; only then the writer is granted, with a token above both.
    read.release().await.unwrap();
    let info = watched
        .until("one reader left", |i| i.holders.len() == 1)
        .await;
    assert_eq!(holders(&info), vec![(ctl_hold.session_id, ctl_hold.token)]);
    assert!(
        !writing.is_finished(),
        "the writer still waits for the other reader"
    );
    hold.stop();
    exits_successfully(&mut ctl_reader).await;
    let write = joined(writing, "the writer is granted").await;
    let write_token = write.token().0;
    assert!(write_token > read_token && write_token > ctl_hold.token);
    let info = watched
        .until("the writer holds", |i| {
            i.mode == EXCLUSIVE && !i.holders.is_empty()
        })
        .await;
    assert_eq!(holders(&info), vec![(writer.id(), write_token)]);
    assert_eq!(
        info.floor,
        Some(write_token),
        "readers' tokens are below the floor"
    );
    assert_eq!(waiters(&info), vec![(late.id(), SHARED)]);

    // The late reader follows the writer.
    write.release().await.unwrap();
    let late_read = joined(late_reading, "the late reader is granted").await;
    assert!(late_read.token().0 > write_token);
}
