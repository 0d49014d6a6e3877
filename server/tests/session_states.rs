//! End-to-end: the session states of the Rust client (issue 15: Chubby's jeopardy) and
//! `picketctl lock`'s lines about them, against three real `picketd` processes. Stopping every
//! replica (SIGSTOP) long enough puts the sessions in jeopardy; resuming them makes them safe
//! again with the locks held; a stop longer than the TTL loses them (expired). A force-release
//! without revocation is a hold lost while the session stays healthy. And `picketctl lock
//! --timeout` gives up through the wait's server-side deadline (exit 4), leaving no waiter.
#![cfg(not(madsim))]

mod support;

use std::time::Duration;

use picket_client::{Client, LostReason, Session, SessionEvent, SessionState};
use picket_proto::proto;
use support::*;

const NS: &str = "jobs";
const ELECTION: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(10);

fn client(cluster: &Cluster, principal: Option<&str>) -> Client {
    on_call_client(cluster, "session-states", TTL, principal)
}

async fn wait_for_state(
    session: &Session,
    what: &str,
    within: Duration,
    pred: impl FnMut(&SessionState) -> bool,
) -> SessionState {
    let mut states = session.state();
    let state = tokio::time::timeout(within, states.wait_for(pred))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no {what} within {within:?}: {:?}",
                session.state().borrow()
            )
        })
        .unwrap()
        .clone();
    state
}

fn kind(event: &SessionEvent) -> &'static str {
    match event {
        SessionEvent::State(SessionState::Healthy) => "healthy",
        SessionEvent::State(SessionState::Jeopardy { .. }) => "jeopardy",
        SessionEvent::State(SessionState::Safe) => "safe",
        SessionEvent::State(SessionState::Lost(_)) => "lost",
        SessionEvent::HoldLost { .. } => "hold lost",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_replicas_mean_jeopardy_then_safe_with_the_locks_held_and_a_longer_stop_loses_them()
{
    let cluster = Cluster::start();
    cluster.leader(ELECTION).await;
    let session = client(&cluster, None).create_session().await.unwrap();
    let mut events = session.events();
    let guard = session.lock(NS, "library").await.unwrap();
    let mut ctl = Picketctl::start(
        &cluster,
        &["lock", NS, "ctl", "--ttl-ms", "10000", "--", "sleep", "120"],
    );
    ctl.wait_for_line("holding jobs/ctl", Duration::from_secs(10))
        .await;
    assert_eq!(*session.state().borrow(), SessionState::Healthy);

    // 1. Every replica stopped: no keepalive is answered; both sessions go into jeopardy at
    // half the TTL, and the replicas are resumed before either deadline.
    cluster.signal_all("-STOP");
    let jeopardy = wait_for_state(&session, "jeopardy", TTL, |s| {
        matches!(s, SessionState::Jeopardy { .. })
    })
    .await;
    let SessionState::Jeopardy {
        unacknowledged_for,
        ttl,
        deadline_in,
    } = jeopardy
    else {
        unreachable!()
    };
    assert_eq!(ttl, TTL);
    assert!(unacknowledged_for >= TTL / 2, "{unacknowledged_for:?}");
    assert!(deadline_in < TTL / 2, "{deadline_in:?}");
    assert!(guard.is_held(), "in jeopardy, still held");
    let line = ctl
        .wait_for_line("in jeopardy", Duration::from_secs(5))
        .await;
    cluster.signal_all("-CONT");
    assert!(
        line.contains("no keepalive acknowledged for")
            && line.contains("of a 10.0 s TTL")
            && line.contains("the command keeps running"),
        "{line}"
    );
    wait_for_state(&session, "safe", TTL, |s| *s == SessionState::Safe).await;
    assert!(guard.is_held(), "safe: held throughout");
    let line = ctl.wait_for_line("safe again", TTL).await;
    assert!(line.contains("keepalive was acknowledged"), "{line}");
    let leader = cluster.leader(ELECTION).await; // whichever leads now
    let info = inspect(&cluster.endpoints[leader], NS, "library", false)
        .await
        .unwrap();
    let holder = info.holder.expect("still held after the stop");
    assert_eq!(
        (holder.session_id, holder.token),
        (session.id(), guard.token().0)
    );

    // 2. Stopped longer than the TTL: lost at the client's deadline, the command stopped.
    cluster.signal_all("-STOP");
    let lost = wait_for_state(&session, "the loss", TTL * 2, |s| {
        matches!(s, SessionState::Lost(_))
    })
    .await;
    assert_eq!(
        lost,
        SessionState::Lost(LostReason::KeepAliveExpired { ttl_ms: 10_000 })
    );
    assert!(!guard.is_held());
    ctl.wait_for_line("LOCK LOST", TTL).await;
    cluster.signal_all("-CONT");
    assert_eq!(ctl.exit_code(Duration::from_secs(30)).await, 3, "lock lost");

    let mut seen = Vec::new();
    while let Some(event) = events.next().await {
        seen.push(event);
    }
    let kinds: Vec<&str> = seen.iter().map(kind).collect();
    assert!(kinds.starts_with(&["jeopardy", "safe"]), "{seen:?}");
    assert!(kinds.ends_with(&["jeopardy", "lost"]), "{seen:?}");
    for pair in kinds.windows(2) {
        let next = match pair[0] {
            "jeopardy" => ["safe", "lost"],
            "safe" => ["jeopardy", "lost"],
            _ => panic!("an event after {pair:?}: {seen:?}"),
        };
        assert!(next.contains(&pair[1]), "{pair:?} in {seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_release_without_revocation_is_a_hold_lost_and_the_session_stays_healthy() {
    let cluster = Cluster::start();
    cluster.leader(ELECTION).await;
    let session = client(&cluster, None).create_session().await.unwrap();
    let guard = session.lock(NS, "stuck").await.unwrap();
    let mut events = session.events();
    let alice = client(&cluster, Some("alice"));
    let bob = client(&cluster, Some("bob"));
    let request = force_release_request(NS, "stuck", guard.token().0, "test: no revocation", false);
    let requested = alice.request_force_release(request).await.unwrap();
    approve_as_requested(&bob, &requested).await;
    let event = tokio::time::timeout(TTL, events.next())
        .await
        .expect("reported at a keepalive")
        .unwrap();
    assert!(
        matches!(&event, SessionEvent::HoldLost { namespace, key, token,
                reason: LostReason::ForceReleased { force_release_id, .. } }
            if namespace == NS && key == "stuck" && *token == guard.token().0
                && *force_release_id == requested.force_release_id),
        "{event:?}"
    );
    assert!(matches!(
        guard.lost().await,
        LostReason::ForceReleased { .. }
    ));
    assert_eq!(*session.state().borrow(), SessionState::Healthy);
    // The session lives on: it takes another key.
    let other = session.try_lock(NS, "other").await.unwrap();
    assert!(other.token() > guard.token());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn picketctl_lock_timeout_gives_up_through_the_server_side_deadline_and_exits_4() {
    let cluster = Cluster::start();
    let leader = cluster.leader(ELECTION).await;
    let watcher = client(&cluster, None);
    // From the oldest retained revision: the new cluster's whole history of the key.
    let mut watch = watcher.watch(Some(NS), "busy", 0);
    let holder = client(&cluster, None).create_session().await.unwrap();
    let _guard = holder.lock(NS, "busy").await.unwrap();
    let mut ctl = Picketctl::start(
        &cluster,
        &["lock", NS, "busy", "--timeout", "1s", "--", "true"],
    );
    assert_eq!(
        ctl.exit_code(Duration::from_secs(20)).await,
        4,
        "{:#?}",
        ctl.lines()
    );
    assert!(
        ctl.lines()
            .iter()
            .any(|l| l.contains("the cluster removed the wait")),
        "{:#?}",
        ctl.lines()
    );
    let info = inspect(&cluster.endpoints[leader], NS, "busy", false)
        .await
        .unwrap();
    assert!(info.waiters.is_empty(), "no waiter left: {info:?}");
    assert_eq!(info.holder.unwrap().session_id, holder.id());
    // The wait was removed by its deadline (not by picketctl closing its session afterwards).
    let removed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            for event in watch.next_page().await.unwrap() {
                if let Some(proto::event::Kind::WaitRemoved(removed)) = event.kind {
                    return removed;
                }
            }
        }
    })
    .await
    .expect("a wait-removed event");
    assert_ne!(removed.session_id, holder.id());
    assert_eq!(
        removed.cause,
        proto::ReleaseCause::WaitExpired as i32,
        "{removed:?}"
    );
}
