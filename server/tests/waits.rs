//! End-to-end: waits that end (issue 15), through the Rust client library against three real
//! `picketd` processes. A waiter that gives up (by its server-side deadline, or by dropping its
//! `lock` future) leaves the queue, is never granted with nobody there, and the next waiter gets
//! the key at once when the holder releases.
#![cfg(not(madsim))]

mod support;

use std::time::Duration;

use picket_client::ClientError;
use support::*;

const NS: &str = "orders";
const KEY: &str = "invoice/7";
const ELECTION: Duration = Duration::from_secs(10);

/// The sessions queued for the key, in order, as the leader's inspection shows them.
async fn waiters(cluster: &Cluster, leader: usize) -> Vec<u64> {
    let info = inspect(&cluster.endpoints[leader], NS, KEY, false)
        .await
        .unwrap();
    info.waiters.iter().map(|w| w.session_id).collect()
}

async fn eventually_waiters(cluster: &Cluster, leader: usize, want: &[u64], what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = waiters(cluster, leader).await;
        if now == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: waiters {now:?}, want {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_queue_and_the_next_one_gets_the_key() {
    let cluster = Cluster::start();
    let leader = cluster.leader(ELECTION).await;
    let holder = cluster.session("holder").await;
    let guard = holder.lock(NS, KEY).await.unwrap();

    // 1. A server-side deadline: the wait is removed by the cluster, the call says so.
    let timed = cluster.session("timed").await;
    let gave_up = timed
        .lock_within(NS, KEY, Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(
        matches!(
            gave_up,
            ClientError::WaitTimedOut {
                timeout_ms: 300,
                ..
            }
        ),
        "{gave_up:?}"
    );
    eventually_waiters(&cluster, leader, &[], "the expired wait is gone").await;

    // 2. A dropped `lock` future: the client cancels the wait in the background.
    let dropped = cluster.session("dropped").await;
    let pending = tokio::spawn({
        let dropped = dropped.clone();
        async move { dropped.lock(NS, KEY).await }
    });
    eventually_waiters(&cluster, leader, &[dropped.id()], "the dropped one queues").await;
    pending.abort();
    let _ = pending.await;
    eventually_waiters(&cluster, leader, &[], "the dropped wait is cancelled").await;

    // 3. An explicit cancel is idempotent.
    let cancelled = cluster.session("cancelled").await;
    let pending = tokio::spawn({
        let cancelled = cancelled.clone();
        async move { cancelled.lock(NS, KEY).await }
    });
    eventually_waiters(&cluster, leader, &[cancelled.id()], "it queues").await;
    let first = cancelled.cancel_wait(NS, KEY).await.unwrap();
    let second = cancelled.cancel_wait(NS, KEY).await.unwrap();
    assert!(first.removed && !second.removed, "{first:?} {second:?}");
    assert!(
        pending.await.unwrap().is_err(),
        "the cancelled lock() fails"
    );

    // The waiter that stays is next: granted in the release's revision, nobody else before it.
    let stays = cluster.session("stays").await;
    let next = tokio::spawn({
        let stays = stays.clone();
        async move { stays.lock(NS, KEY).await }
    });
    eventually_waiters(&cluster, leader, &[stays.id()], "the one that stays queues").await;
    let old_token = guard.token();
    guard.release().await.unwrap();
    let granted = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("granted at once")
        .unwrap()
        .unwrap();
    assert!(granted.token() > old_token);
    let info = inspect(&cluster.endpoints[leader], NS, KEY, false)
        .await
        .unwrap();
    assert_eq!(info.holder.unwrap().session_id, stays.id());
}
