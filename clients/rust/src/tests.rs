//! The client against fake replicas on loopback (real HTTP/2, so outside the simulator).

mod fake;

use std::time::Duration;

use picket_core::locks::Token;
use tokio::time::Instant;

use super::{Client, ClientConfig, ClientError, LostReason, SessionEvent, SessionState, Transport};
use crate::FencingGate;
use fake::KeepAliveMode;

fn config(endpoints: &[String]) -> ClientConfig {
    let mut config = ClientConfig::new(endpoints.iter().cloned(), "client-test");
    config.rpc_timeout = Duration::from_millis(500);
    config.retry_budget = Duration::from_secs(5);
    config.backoff_min = Duration::from_millis(10);
    config.backoff_max = Duration::from_millis(100);
    config.wait_slice = Duration::from_millis(100);
    config.session_ttl = Some(Duration::from_secs(3));
    config
}

#[tokio::test]
async fn follows_the_leader_hint_and_keeps_going_there() {
    let (state, endpoints) = fake::start(3, 2).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let session = client.create_session().await.unwrap();
    assert_eq!(client.leader_guess(), endpoints[2]);
    assert_eq!(
        state.lock().unwrap().creates,
        vec![2],
        "created at the leader only"
    );

    let guard = session.lock("orders", "a").await.unwrap();
    let seen: Vec<usize> = state.lock().unwrap().acquires.iter().map(|a| a.0).collect();
    assert_eq!(seen, vec![2], "went straight to the leader it learned");
    guard.release().await.unwrap();
    assert_eq!(state.lock().unwrap().releases.len(), 1);
}

/// A mixed-version cluster during an upgrade: replicas that still send the bare `ErrorDetail`
/// are understood (the hint is followed, the rule is read).
#[tokio::test]
async fn follows_the_bare_hint_and_reads_the_bare_rule_of_an_older_server() {
    let (state, endpoints) = fake::start(3, 1).await;
    state.lock().unwrap().old_form_errors = true;
    let client = Client::new(config(&endpoints)).unwrap();
    let session = client.create_session().await.unwrap();
    assert_eq!(client.leader_guess(), endpoints[1]);
    assert_eq!(state.lock().unwrap().creates, vec![1]);
    state.lock().unwrap().sessions.remove(&session.id());
    let error = session.try_lock("orders", "a").await.unwrap_err();
    assert_eq!(
        error,
        ClientError::SessionLost {
            session_id: session.id(),
            reason: LostReason::UnknownSession
        }
    );
    assert_eq!(
        state.lock().unwrap().session_streams_opened,
        0,
        "an older server has no Session stream: the client went unary"
    );
}

/// One `Session` stream carries every session of a client (keepalives, locks, releases); with
/// `Transport::Unary` the same calls go unary, with a `KeepAlive` stream per session.
#[tokio::test]
async fn one_session_stream_carries_all_sessions_of_a_client_unless_unary_is_chosen() {
    for transport in [Transport::Stream, Transport::Unary] {
        let (state, endpoints) = fake::start(1, 0).await;
        let mut config = config(&endpoints);
        config.transport = transport;
        let client = Client::new(config).unwrap();
        let first = client.create_session().await.unwrap();
        let second = client.create_session().await.unwrap();
        let a = first.lock("orders", "a").await.unwrap();
        let b = second.try_lock("orders", "b").await.unwrap();
        assert!(b.token() > a.token());
        let waiting = tokio::spawn({
            let second = second.clone();
            async move { second.lock("orders", "a").await }
        });
        // Renewals of both sessions while the wait is held.
        for session in [&first, &second] {
            let mut acks = session.keepalive_acks();
            let created = acks.borrow_and_update().sent_at;
            acks.wait_for(|ack| ack.sent_at > created).await.unwrap();
        }
        a.release().await.unwrap();
        let handed = waiting.await.unwrap().unwrap();
        assert!(handed.token() > b.token());
        let state = state.lock().unwrap();
        let (session_streams, keepalive_streams) =
            (state.session_streams_opened, state.keepalive_streams_opened);
        match transport {
            Transport::Stream => assert_eq!((session_streams, keepalive_streams), (1, 1)),
            Transport::Unary => assert_eq!((session_streams, keepalive_streams), (0, 2)),
        }
    }
}

#[tokio::test]
async fn a_retry_across_a_leader_change_keeps_its_request_id_and_gets_the_same_token() {
    let (state, endpoints) = fake::start(2, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let session = client.create_session().await.unwrap();
    {
        let mut state = state.lock().unwrap();
        state.acquires_lost_in_leader_change = 1;
        state.switch_to = 1;
    }
    let guard = session.lock("orders", "a").await.unwrap();
    let later = session.try_lock("orders", "b").await.unwrap();

    let state = state.lock().unwrap();
    let ids: Vec<(usize, u64)> = state.acquires.iter().map(|a| (a.0, a.2)).collect();
    assert_eq!(ids[0].0, 0, "first attempt at the old leader");
    assert_eq!(ids[1].0, 1, "retried at the new leader");
    assert_eq!(ids[0].1, ids[1].1, "the retry keeps its request id");
    assert!(ids[2].1 > ids[1].1, "a new request takes a higher id");
    assert_eq!(state.holders["a"], (session.id(), guard.token().0));
    assert_eq!(
        guard.token(),
        Token(1),
        "the grant applied once, by the first attempt"
    );
    assert_eq!(later.token(), Token(2));
}

#[tokio::test]
async fn try_lock_on_a_held_key_names_the_holder() {
    let (_state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let first = client.create_session().await.unwrap();
    let second = client.create_session().await.unwrap();
    let guard = first.try_lock("orders", "a").await.unwrap();
    let error = second.try_lock("orders", "a").await.unwrap_err();
    assert_eq!(
        error,
        ClientError::Held {
            namespace: "orders".into(),
            key: "a".into(),
            holder_session_id: first.id(),
            token: guard.token().0,
        }
    );
}

#[tokio::test]
async fn a_waiting_lock_reissues_the_same_request_until_granted() {
    let (state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let holder = client.create_session().await.unwrap();
    let waiter = client.create_session().await.unwrap();
    let held = holder.lock("orders", "a").await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter.lock("orders", "a").await;
        (waiter, guard)
    });
    // Let the waiter's wait be re-issued a few times (each slice is 100 ms).
    tokio::time::sleep(Duration::from_millis(350)).await;
    let next = held
        .release()
        .await
        .unwrap()
        .expect("the waiter is granted next");
    let (waiter, guard) = waiting.await.unwrap();
    let guard = guard.unwrap();
    assert_eq!(next.session_id, waiter.id());
    assert_eq!(guard.token().0, next.token);

    let state = state.lock().unwrap();
    let waits: Vec<u64> = state
        .acquires
        .iter()
        .filter(|a| a.1 == waiter.id())
        .map(|a| a.2)
        .collect();
    assert!(waits.len() >= 3, "re-issued while queued: {waits:?}");
    assert!(
        waits.iter().all(|id| *id == waits[0]),
        "same request id: {waits:?}"
    );
}

#[tokio::test]
async fn the_lock_is_lost_when_the_server_says_the_session_is_gone() {
    let (state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let session = client.create_session().await.unwrap();
    let guard = session.lock("orders", "a").await.unwrap();
    assert!(guard.is_held());
    state.lock().unwrap().revoke(session.id());
    let reason = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost within one keepalive interval");
    assert_eq!(reason, LostReason::Revoked);
    assert!(!guard.is_held());
    let error = guard.release().await.unwrap_err();
    assert!(matches!(
        error,
        ClientError::SessionLost {
            reason: LostReason::Revoked,
            ..
        }
    ));
}

/// Issue 16, finding 3: a force-release without revocation never reached the holder's client.
#[tokio::test]
async fn a_force_release_reported_by_keepalives_ends_only_that_guard() {
    let (state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let session = client.create_session().await.unwrap();
    let released = session.lock("orders", "a").await.unwrap();
    let kept = session.lock("orders", "b").await.unwrap();
    let mut signal = released.lost_signal();
    state.lock().unwrap().force_release("a", 77);
    let reason = tokio::time::timeout(Duration::from_secs(3), released.lost())
        .await
        .expect("lost within one keepalive interval");
    let LostReason::ForceReleased {
        revision,
        force_release_id,
    } = reason
    else {
        panic!("{reason:?}")
    };
    assert_eq!(force_release_id, 77);
    assert!(revision > released.token().0);
    assert!(!released.is_held());
    assert!(signal.wait_for(Option::is_some).await.is_ok());
    // The session and its other lock live on, through later answers repeating the report.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(session.is_alive());
    assert!(kept.is_held());
    assert!(kept.lost_signal().borrow().is_none());
    let error = released.release().await.unwrap_err();
    assert!(
        matches!(&error, ClientError::LockLost { key, .. } if key == "a"),
        "{error:?}"
    );
    kept.release().await.unwrap();
    // A new grant of the same key (another token) is not taken for the lost one.
    let again = session.lock("orders", "a").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(again.is_held());
}

#[tokio::test]
async fn an_unknown_session_answer_loses_the_session() {
    let (state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let session = client.create_session().await.unwrap();
    // The fake forgets the session and stops answering keepalives (which would say `lost`, and
    // may come first: the stream's first request, `subscribe`, moves when they are answered), so
    // the acquire's answer is what tells.
    {
        let mut state = state.lock().unwrap();
        state.sessions.remove(&session.id());
        state.keepalive_mode = Some(KeepAliveMode::Silent);
    }
    let error = session.try_lock("orders", "a").await.unwrap_err();
    assert_eq!(
        error,
        ClientError::SessionLost {
            session_id: session.id(),
            reason: LostReason::UnknownSession
        }
    );
    assert!(!session.is_alive());
}

/// Paused time: the fake answers keepalives (200 ms after receipt), then goes silent. The lock
/// must be lost at `send time of the last acknowledged keepalive + ttl - 1 %`, which is before
/// the server's own expiry (`receipt + ttl`) by the drift margin (30 ms of the 3 s TTL);
/// counting from the answer would be 200 ms late.
#[tokio::test(start_paused = true)]
async fn a_keepalive_outage_loses_the_lock_at_send_time_plus_ttl_before_the_server_would() {
    let (state, endpoints, factory) = fake::start_in_memory(0);
    state.lock().unwrap().keepalive_answer_delay = Duration::from_millis(200);
    let client = Client::with_channels(config(&endpoints), factory).unwrap();
    let session = client.create_session().await.unwrap();
    let ttl = session.ttl();
    let guard = session.lock("orders", "a").await.unwrap();
    // A few keepalive rounds (every ttl / 3).
    tokio::time::sleep(ttl * 2).await;
    assert!(guard.is_held());
    state.lock().unwrap().keepalive_mode = Some(KeepAliveMode::Silent);
    let reason = guard.lost().await;
    let lost_at = Instant::now();
    assert_eq!(reason, LostReason::KeepAliveExpired { ttl_ms: 3_000 });

    let (_, last_receipt) = *state.lock().unwrap().keepalives_answered.last().unwrap();
    let server_expiry = last_receipt + ttl;
    // A leader whose clock runs 0.9 % fast expires the session 0.9 % of the TTL early, in the
    // client's time: still after the client gave up.
    let fast_leader_expiry = last_receipt + ttl.mul_f64(0.991);
    assert!(
        lost_at <= fast_leader_expiry,
        "lost at {lost_at:?}, after a 0.9 %-fast leader's expiry {fast_leader_expiry:?}"
    );
    let margin = Duration::from_millis(30);
    assert!(
        lost_at + margin <= server_expiry,
        "lost at {lost_at:?}, less than the margin before the server expiry {server_expiry:?}"
    );
    assert!(
        server_expiry - lost_at < margin + Duration::from_millis(20),
        "not given up early: {:?} before the server",
        server_expiry - lost_at
    );
    assert!(!guard.is_held());
}

/// Paused time: `keepalive_acks` starts at the creation, then follows every acknowledged
/// keepalive with its send time (answered 200 ms later), and the lease ends at the last
/// acknowledged send time + ttl.
#[tokio::test(start_paused = true)]
async fn keepalive_acks_report_each_acknowledged_renewal_with_its_send_time() {
    let (state, endpoints, factory) = fake::start_in_memory(0);
    state.lock().unwrap().keepalive_answer_delay = Duration::from_millis(200);
    let client = Client::with_channels(config(&endpoints), factory).unwrap();
    let before = Instant::now();
    let session = client.create_session().await.unwrap();
    let mut acks = session.keepalive_acks();
    let created = *acks.borrow_and_update();
    assert_eq!(created.session_id, session.id());
    assert!(created.sent_at >= before && created.acked_at >= created.sent_at);
    assert_eq!(created.ttl, session.ttl());

    let mut seen = Vec::new();
    while seen.len() < 3 {
        acks.changed().await.unwrap();
        seen.push(*acks.borrow_and_update());
    }
    for pair in seen.windows(2) {
        assert!(pair[1].sent_at > pair[0].sent_at, "{seen:?}");
    }
    for ack in &seen {
        assert_eq!(
            ack.acked_at - ack.sent_at,
            Duration::from_millis(200),
            "{ack:?}"
        );
        assert_eq!(ack.ttl, Duration::from_millis(3_000));
        assert_eq!(ack.margin, Duration::from_millis(30), "1 % of the TTL");
        assert_eq!(ack.deadline(), ack.sent_at + Duration::from_millis(2_970));
    }
    let answered = state.lock().unwrap().keepalives_answered.len();
    assert!(answered >= 3, "{answered} keepalives answered");

    state.lock().unwrap().keepalive_mode = Some(KeepAliveMode::Silent);
    session.lost().await;
    let (lost_at, last) = (Instant::now(), *acks.borrow());
    let deadline = last.deadline();
    assert!(
        lost_at >= deadline,
        "lost at {lost_at:?}, before {deadline:?}"
    );
    assert!(
        lost_at - deadline < Duration::from_millis(50),
        "lost late: {lost_at:?}"
    );
}

#[tokio::test]
async fn the_fencing_gate_refuses_a_superseded_holders_token() {
    let (_state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let gate = FencingGate::new(16);
    let first = client.create_session().await.unwrap();
    let old = first.lock("orders", "ledger").await.unwrap();
    let old_token = old.token();
    gate.check("orders/ledger", old_token).unwrap();
    old.release().await.unwrap();

    let second = client.create_session().await.unwrap();
    let new = second.lock("orders", "ledger").await.unwrap();
    assert!(new.token() > old_token);
    gate.check("orders/ledger", new.token()).unwrap();
    let refused = gate.check("orders/ledger", old_token).unwrap_err();
    assert!(
        matches!(refused, crate::FencingError::Stale { .. }),
        "{refused}"
    );
}

#[tokio::test]
async fn an_unreachable_cluster_is_a_typed_error_within_the_budget() {
    // A port nothing listens on (bound, then closed).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let mut config = config(&[endpoint]);
    config.retry_budget = Duration::from_millis(300);
    let client = Client::new(config).unwrap();
    let error = client.create_session().await.unwrap_err();
    assert!(
        matches!(error, ClientError::Unavailable { what: "create_session", attempts, .. } if attempts >= 2),
        "{error}"
    );
}

#[tokio::test]
async fn a_release_overtaken_by_a_later_request_is_sent_again_under_a_new_id() {
    let (state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let session = client.create_session().await.unwrap();
    let guard = session.lock("orders", "a").await.unwrap();
    state.lock().unwrap().releases_overtaken = 2;
    guard.release().await.unwrap();
    let state = state.lock().unwrap();
    assert!(state.holders.is_empty(), "released");
    let ids: Vec<u64> = state.releases.iter().map(|r| r.1).collect();
    assert_eq!(ids.len(), 3, "two refusals, then the release: {ids:?}");
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "a new, higher id each time: {ids:?}"
    );
}

#[tokio::test]
async fn a_release_overtaken_too_often_is_refused() {
    let (state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let session = client.create_session().await.unwrap();
    let guard = session.lock("orders", "a").await.unwrap();
    state.lock().unwrap().releases_overtaken = 100;
    let error = guard.release().await.unwrap_err();
    assert_eq!(error.rule(), Some("request_too_old"));
    assert_eq!(state.lock().unwrap().releases.len(), 17);
}

#[tokio::test]
async fn dropping_a_guard_releases_it_in_the_background() {
    let (state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let session = client.create_session().await.unwrap();
    drop(session.lock("orders", "a").await.unwrap());
    for _ in 0..100 {
        if state.lock().unwrap().holders.is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the dropped guard was not released");
}

#[tokio::test]
async fn dropping_a_waiting_lock_cancels_the_wait_in_the_background() {
    let (state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let holder = client.create_session().await.unwrap();
    let waiter = client.create_session().await.unwrap();
    let _held = holder.lock("orders", "a").await.unwrap();
    // Give up waiting after a while: the future is dropped while queued.
    let gave_up =
        tokio::time::timeout(Duration::from_millis(250), waiter.lock("orders", "a")).await;
    assert!(gave_up.is_err(), "still queued when given up");
    for _ in 0..100 {
        let (cancels, queued) = {
            let state = state.lock().unwrap();
            (
                state.cancels.clone(),
                state.queues["a"].contains(&waiter.id()),
            )
        };
        if cancels == vec![(waiter.id(), "a".to_owned())] {
            assert!(!queued, "the cancel left the queue");
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no CancelWait after the waiting lock was dropped");
}

/// A background cancel names the session and the key, not the call: the next call on the key
/// starts only once it was answered, so it can neither remove the new call's wait nor hand the
/// dropped call's task the new call's grant to release (found by the simulation, seed 119).
#[tokio::test]
async fn a_new_lock_of_a_key_waits_for_the_background_cancel_of_the_dropped_one() {
    let (state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let holder = client.create_session().await.unwrap();
    let waiter = client.create_session().await.unwrap();
    let held = holder.lock("orders", "a").await.unwrap();
    state.lock().unwrap().cancel_wait_delay = Duration::from_millis(300);
    // Given up once the fake has queued it (not after a fixed time: on a loaded machine the
    // Acquire could reach the fake after the count below and look like a later one).
    {
        let lock = waiter.lock("orders", "a");
        tokio::pin!(lock);
        loop {
            tokio::select! {
                _ = &mut lock => panic!("granted while the key is held"),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            let queues = &state.lock().unwrap().queues;
            if queues.get("a").is_some_and(|q| q.contains(&waiter.id())) {
                break;
            }
        }
    }
    let acquires_before = state.lock().unwrap().cancels_before_acquire.len();
    // Another key is not held back by the cancel.
    let other = waiter.try_lock("orders", "b").await.unwrap();
    // The same key again, at once: its Acquire reaches the leader after the cancel.
    let again = tokio::spawn({
        let waiter = waiter.clone();
        async move { waiter.lock("orders", "a").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.release().await.unwrap();
    let again = again
        .await
        .unwrap()
        .expect("granted after the holder released");
    let state = state.lock().unwrap();
    let seen = &state.cancels_before_acquire[acquires_before..];
    assert_eq!(seen[0], 0, "the other key went ahead of the slow cancel");
    assert!(
        seen[1..].iter().all(|applied| *applied == 1),
        "every acquire of the key came after the cancel: {seen:?}"
    );
    assert_eq!(state.cancels, vec![(waiter.id(), "a".to_owned())]);
    assert_eq!(state.holders["a"], (waiter.id(), again.token().0));
    drop(other);
}

#[tokio::test]
async fn a_granted_lock_sends_no_cancel() {
    let (state, endpoints) = fake::start(1, 0).await;
    let client = Client::new(config(&endpoints)).unwrap();
    let session = client.create_session().await.unwrap();
    let guard = session.lock("orders", "a").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(state.lock().unwrap().cancels.is_empty());
    guard.release().await.unwrap();
}

/// Paused time: the leader goes silent (jeopardy at half the TTL after the send of the newest
/// acknowledged keepalive, the lock still held), answers again (safe), then goes silent for
/// good (lost at the deadline). The event stream saw every change, in order, and ends.
#[tokio::test(start_paused = true)]
async fn silence_is_jeopardy_at_half_the_ttl_then_safe_when_answered_then_lost_at_the_deadline() {
    let (state, endpoints, factory) = fake::start_in_memory(0);
    let client = Client::with_channels(config(&endpoints), factory).unwrap();
    let session = client.create_session().await.unwrap();
    let mut events = session.events();
    let mut states = session.state();
    assert_eq!(*states.borrow_and_update(), SessionState::Healthy);
    let guard = session.lock("orders", "a").await.unwrap();
    tokio::time::sleep(session.ttl()).await;
    assert_eq!(*states.borrow(), SessionState::Healthy, "answered on time");

    state.lock().unwrap().keepalive_mode = Some(KeepAliveMode::Silent);
    let jeopardy = states
        .wait_for(|s| matches!(s, SessionState::Jeopardy { .. }))
        .await
        .unwrap()
        .clone();
    let newest = *session.keepalive_acks().borrow();
    assert_eq!(
        Instant::now(),
        newest.sent_at + Duration::from_millis(1_500),
        "half the 3 s TTL after the newest acknowledged send"
    );
    assert_eq!(
        jeopardy,
        SessionState::Jeopardy {
            unacknowledged_for: Duration::from_millis(1_500),
            ttl: Duration::from_millis(3_000),
            deadline_in: Duration::from_millis(1_470),
        }
    );
    assert!(guard.is_held(), "in jeopardy the lock is still held");

    state.lock().unwrap().keepalive_mode = Some(KeepAliveMode::Answer);
    states.wait_for(|s| *s == SessionState::Safe).await.unwrap();
    assert!(guard.is_held(), "safe: held throughout");
    tokio::time::sleep(session.ttl()).await;
    assert_eq!(*states.borrow(), SessionState::Safe, "stays safe");

    state.lock().unwrap().keepalive_mode = Some(KeepAliveMode::Silent);
    let expired = LostReason::KeepAliveExpired { ttl_ms: 3_000 };
    assert_eq!(guard.lost().await, expired);
    assert_eq!(*states.borrow(), SessionState::Lost(expired.clone()));

    let mut seen = Vec::new();
    while let Some(event) = events.next().await {
        seen.push(event);
    }
    let kinds: Vec<&str> = seen
        .iter()
        .map(|event| match event {
            SessionEvent::State(SessionState::Jeopardy { .. }) => "jeopardy",
            SessionEvent::State(SessionState::Safe) => "safe",
            SessionEvent::State(SessionState::Lost(_)) => "lost",
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["jeopardy", "safe", "jeopardy", "lost"], "{seen:?}");
    assert_eq!(
        seen.last(),
        Some(&SessionEvent::State(SessionState::Lost(expired)))
    );
}

/// Paused time: the leader's keepalive stream stalls (a leader gone without closing the
/// connection) while a new stream is answered. The per-attempt RPC timeout is 5 s, longer than
/// the 3 s TTL; the keepalive attempt still times out at a quarter of the TTL, so the client
/// reopens the stream in time and the session (and its lock) survive.
#[tokio::test(start_paused = true)]
async fn a_stalled_keepalive_stream_is_given_up_in_time_even_with_a_long_rpc_timeout() {
    let (state, endpoints, factory) = fake::start_in_memory(0);
    let mut config = config(&endpoints);
    config.rpc_timeout = Duration::from_secs(5);
    let client = Client::with_channels(config, factory).unwrap();
    let session = client.create_session().await.unwrap();
    let guard = session.lock("orders", "a").await.unwrap();
    tokio::time::sleep(session.ttl()).await;
    let stalled = {
        let mut state = state.lock().unwrap();
        state.keepalive_streams_stalled_below = state.keepalive_streams_opened;
        state.keepalive_streams_opened
    };
    tokio::time::sleep(session.ttl() * 3).await;
    assert!(
        guard.is_held(),
        "lost: {:?}",
        session.state().borrow().clone()
    );
    assert!(session.state().borrow().is_healthy());
    assert!(
        state.lock().unwrap().keepalive_streams_opened > stalled,
        "the stalled stream was replaced"
    );
    assert_eq!(
        super::keepalive_attempt_timeout(Duration::from_secs(5), session.ttl()),
        Duration::from_millis(750)
    );
}

/// Paused time: a force-release without revocation is one `HoldLost` event (the server's
/// repeats are not events again); the session stays healthy; closing it is the final event.
#[tokio::test(start_paused = true)]
async fn a_hold_force_released_without_revocation_is_one_event_and_the_session_stays_healthy() {
    let (state, endpoints, factory) = fake::start_in_memory(0);
    let client = Client::with_channels(config(&endpoints), factory).unwrap();
    let session = client.create_session().await.unwrap();
    let guard = session.lock("orders", "a").await.unwrap();
    let mut events = session.events();
    state.lock().unwrap().force_release("a", 77);
    let event = events.next().await.unwrap();
    assert!(
        matches!(&event, SessionEvent::HoldLost { namespace, key, token, reason: LostReason::ForceReleased { force_release_id: 77, .. } }
            if namespace == "orders" && key == "a" && *token == guard.token().0),
        "{event:?}"
    );
    // Keepalive answers repeat the hold; the event is not repeated.
    tokio::time::sleep(session.ttl()).await;
    assert_eq!(*session.state().borrow(), SessionState::Healthy);
    assert!(session.is_alive());
    session.clone().close().await.unwrap();
    assert_eq!(
        events.next().await,
        Some(SessionEvent::State(SessionState::Lost(LostReason::Closed)))
    );
    assert_eq!(events.next().await, None);
}
