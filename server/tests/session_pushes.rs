//! End-to-end: the `Session` stream's pushes (docs/api.md, "Pushes") against three real
//! `picketd` processes. The sessions of the Rust client have the longest TTL the cluster allows
//! (300 s: after the first keepalive, the next goes out 100 s later), and each test checks that
//! no keepalive was acknowledged after the first: what the holder learned, it learned from a
//! push. A two-person force-release without revocation ends the holder's guard (and
//! `picketctl lock` logs it); a revoking force-release and a close by another process lose the
//! session with its cause. A raw stream that asked for pushes gets them, with their fields; one
//! that did not gets none and works as before.
#![cfg(not(madsim))]

mod support;

use std::time::Duration;

use picket_client::{
    Client, KeepAliveAck, LockGuard, LostReason, Session, SessionEnd, SessionEvent, SessionState,
};
use picket_proto::proto::{
    self, session_event, session_request::Request as In, session_response::Response as Out,
};
use picket_server::api::stream::ChannelStream;
use support::*;
use tokio::sync::{mpsc, watch};
use tonic::Streaming;

const NS: &str = "pushes";
const ELECTION: Duration = Duration::from_secs(10);
/// The cluster's longest session TTL: a keepalive every 100 s.
const TTL: Duration = Duration::from_secs(300);
/// How long a step may take before the test gives up on it (well below `TTL / 3`).
const STEP: Duration = Duration::from_secs(60);

fn client(cluster: &Cluster, principal: Option<&str>) -> Client {
    on_call_client(cluster, "session-pushes", TTL, principal)
}

/// A session whose first keepalive was acknowledged (the next one is `TTL / 3` away), and its
/// acknowledgements.
async fn renewed_session(client: &Client) -> (Session, watch::Receiver<KeepAliveAck>) {
    let session = client.create_session().await.unwrap();
    let mut acks = session.keepalive_acks();
    tokio::time::timeout(STEP, acks.wait_for(|ack| ack.keepalives >= 1))
        .await
        .expect("the first keepalive is acknowledged")
        .unwrap();
    (session, acks)
}

/// No keepalive answer arrived after the first: whatever the session learned came by a push.
fn assert_no_keepalive_since_the_first(acks: &watch::Receiver<KeepAliveAck>) {
    assert_eq!(acks.borrow().keepalives, 1, "{:?}", *acks.borrow());
}

/// Alice requests and Bob approves a force-release of `guard`'s hold: its id.
async fn force_release(cluster: &Cluster, guard: &LockGuard, revoke_session: bool) -> u64 {
    force_release_of(cluster, guard.key(), guard.token().0, revoke_session).await
}

/// Alice requests and Bob approves a force-release of the hold of `key` with `token`: its id.
async fn force_release_of(cluster: &Cluster, key: &str, token: u64, revoke_session: bool) -> u64 {
    let request = force_release_request(NS, key, token, "test: pushes", revoke_session);
    let alice = client(cluster, Some("alice"));
    let requested = alice.request_force_release(request).await.unwrap();
    approve_as_requested(&client(cluster, Some("bob")), &requested).await;
    requested.force_release_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_release_without_revocation_reaches_the_holders_guard_by_a_push() {
    let cluster = Cluster::start();
    cluster.leader(ELECTION).await;
    let (session, acks) = renewed_session(&client(&cluster, None)).await;
    let guard = session.lock(NS, "stuck").await.unwrap();
    let kept = session.lock(NS, "kept").await.unwrap();
    let mut events = session.events();
    let id = force_release(&cluster, &guard, false).await;

    let reason = tokio::time::timeout(STEP, guard.lost())
        .await
        .expect("the push ends the guard");
    assert!(
        matches!(reason, LostReason::ForceReleased { force_release_id, revision }
            if force_release_id == id && revision > guard.token().0),
        "{reason:?}"
    );
    let event = events.next().await.unwrap();
    assert!(
        matches!(&event, SessionEvent::HoldLost { namespace, key, token, reason: r }
            if namespace == NS && key == "stuck" && *token == guard.token().0 && *r == reason),
        "{event:?}"
    );
    // Only that hold: the session and its other guard live on.
    assert!(kept.is_held() && session.is_alive());
    assert_eq!(*session.state().borrow(), SessionState::Healthy);
    let other = session.try_lock(NS, "other").await.unwrap();
    assert!(other.token() > guard.token());
    assert_no_keepalive_since_the_first(&acks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_or_closed_session_is_pushed_lost_with_its_cause() {
    let cluster = Cluster::start();
    let leader = cluster.leader(ELECTION).await;
    let holders = client(&cluster, None);

    // Revoked by a force-release with revocation.
    let (revoked, revoked_acks) = renewed_session(&holders).await;
    let guard = revoked.lock(NS, "revoked").await.unwrap();
    let also = revoked.lock(NS, "also-held").await.unwrap();
    let id = force_release(&cluster, &guard, true).await;
    let reason = tokio::time::timeout(STEP, revoked.lost())
        .await
        .expect("the push loses the session");
    assert!(
        matches!(reason, LostReason::Ended { cause: SessionEnd::Revoked { force_release_id }, .. }
            if force_release_id == id),
        "{reason:?}"
    );
    assert_eq!(guard.lost().await, reason);
    assert_eq!(also.lost().await, reason);
    assert_eq!(*revoked.state().borrow(), SessionState::Lost(reason));
    assert_no_keepalive_since_the_first(&revoked_acks);

    // Closed by another process that has the secret.
    let (closed, closed_acks) = renewed_session(&holders).await;
    let guard = closed.lock(NS, "closed").await.unwrap();
    let mut events = closed.events();
    let close = proto::CloseSessionRequest {
        session_id: closed.id(),
        session_secret: closed.secret().as_bytes().to_vec(),
    };
    let mut other_process = lock(&cluster.endpoints[leader]).await.unwrap();
    let answer = other_process
        .close_session(close)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.holds_released, 1, "{answer:?}");
    let reason = tokio::time::timeout(STEP, closed.lost())
        .await
        .expect("the push loses the session");
    assert!(
        matches!(
            reason,
            LostReason::Ended {
                cause: SessionEnd::Closed,
                ..
            }
        ),
        "{reason:?}"
    );
    assert_eq!(guard.lost().await, reason);
    assert_eq!(
        events.next().await,
        Some(SessionEvent::State(SessionState::Lost(reason.clone())))
    );
    assert!(reason.to_string().contains("closed"), "{reason}");
    assert_no_keepalive_since_the_first(&closed_acks);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn picketctl_lock_logs_a_pushed_force_release() {
    let cluster = Cluster::start();
    cluster.leader(ELECTION).await;
    let ttl_ms = TTL.as_millis().to_string();
    let args = ["lock", NS, "job", "--ttl-ms", &ttl_ms, "--", "sleep", "600"];
    let mut ctl = Picketctl::start(&cluster, &args);
    let at = cluster.endpoints[cluster.leader(ELECTION).await].clone();
    let holder = loop {
        let info = inspect(&at, NS, "job", false).await.unwrap();
        if let Some(holder) = info.holder {
            break holder;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let request = force_release_of(&cluster, "job", holder.token, false).await;
    let wanted = format!("request {request}");
    let line = ctl.wait_for_line("LOCK LOST", STEP).await;
    assert!(
        line.contains("force-released") && line.contains(&wanted),
        "{line}"
    );
    let code = ctl.exit_code(STEP).await;
    assert_eq!(code, 3, "lock lost: {:#?}", ctl.lines());
}

/// A raw `Session` stream (no client library).
struct Raw {
    tx: mpsc::Sender<proto::SessionRequest>,
    rx: Streaming<proto::SessionResponse>,
}

impl Raw {
    async fn open(endpoint: &str) -> Raw {
        let (tx, rx) = mpsc::channel(16);
        let request = tonic::Request::new(ChannelStream::new(rx));
        let mut client = lock(endpoint).await.unwrap();
        let rx = client.session(request).await.unwrap().into_inner();
        Raw { tx, rx }
    }

    async fn next(&mut self) -> proto::SessionResponse {
        tokio::time::timeout(STEP, self.rx.message())
            .await
            .expect("a message on the stream")
            .unwrap()
            .expect("the stream goes on")
    }

    /// The answer to `seq` and every message that came before it.
    async fn call(&mut self, seq: u64, request: In) -> (Out, Vec<proto::SessionResponse>) {
        let message = proto::SessionRequest {
            seq,
            request: Some(request),
        };
        self.tx.send(message).await.unwrap();
        let mut before = Vec::new();
        loop {
            let next = self.next().await;
            if next.seq == seq {
                return (next.response.expect("an answer has a body"), before);
            }
            before.push(next);
        }
    }

    async fn keepalive(&mut self, seq: u64, at: &str, session: u64) -> proto::KeepAliveResponse {
        match self.call(seq, keepalive_of(at, session, seq)).await.0 {
            Out::KeepAlive(answer) => answer,
            other => panic!("a keepalive answer, got {other:?}"),
        }
    }

    /// A grant of `key` to `session` (a try): its token. Nothing is pushed meanwhile.
    async fn acquire(&mut self, seq: u64, at: &str, session: u64, key: &str) -> u64 {
        let acquire = try_acquire_request(session, seq, NS, key, secret_of(at, session));
        let (Out::Acquire(acquired), before) = self.call(seq, In::Acquire(acquire)).await else {
            panic!("an acquire answer");
        };
        no_pushes(&before);
        granted(&acquired).expect("granted")
    }

    /// The next push (answers to nothing in flight may not come meanwhile).
    async fn push(&mut self) -> proto::SessionEvent {
        let next = self.next().await;
        match (next.seq, next.response) {
            (0, Some(Out::Event(event))) => event,
            other => panic!("a push, got {other:?}"),
        }
    }
}

fn no_pushes(messages: &[proto::SessionResponse]) {
    for message in messages {
        assert!(
            message.seq != 0 && !matches!(message.response, Some(Out::Event(_))),
            "a push on a stream that did not ask: {message:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_stream_that_subscribed_gets_pushes_and_an_old_style_stream_works_unchanged() {
    let (cluster, _, at) = cluster_with_leader(ELECTION).await;
    let a = create_session(&at, "raw-a", 10_000).await;

    // `subscribed` asked for pushes and carries `a`; `old` is a client from before pushes;
    // `stranger` asked for pushes but never proved `a`'s secret.
    let mut subscribed = Raw::open(&at).await;
    let (answer, before) = subscribed
        .call(1, In::Subscribe(proto::SubscribeRequest {}))
        .await;
    assert!(
        matches!(answer, Out::Subscribe(_)) && before.is_empty(),
        "{answer:?}"
    );
    let renewed = subscribed.keepalive(2, &at, a).await;
    assert!(!renewed.lost && renewed.error.is_none(), "{renewed:?}");
    let mut stranger = Raw::open(&at).await;
    stranger
        .call(1, In::Subscribe(proto::SubscribeRequest {}))
        .await;
    let mut wrong = proto::KeepAliveRequest {
        session_id: a,
        seq: 1,
        session_secret: vec![0x11; 32],
    };
    let (Out::KeepAlive(refused), _) = stranger.call(2, In::KeepAlive(wrong.clone())).await else {
        panic!("a keepalive answer");
    };
    assert_eq!(refused.error.unwrap().rule, "session_not_yours");

    let mut old = Raw::open(&at).await;
    assert!(old.keepalive(1, &at, a).await.error.is_none());
    let token = old.acquire(2, &at, a, "k").await;

    // A force-release without revocation: pushed to `subscribed` with the hold and the request.
    let request = force_release_of(&cluster, "k", token, false).await;
    let pushed = subscribed.push().await;
    assert_eq!(pushed.session_id, a);
    let Some(session_event::Kind::HoldLost(hold)) = pushed.kind else {
        panic!("a hold lost: {pushed:?}");
    };
    assert_eq!((hold.namespace.as_str(), hold.key.as_str()), (NS, "k"));
    assert_eq!(hold.token, token);
    assert_eq!(hold.force_release_id, request);
    assert_eq!(hold.revision, pushed.revision);
    assert!(hold.revision > token);

    // The session closed (unary, by the holder of its secret) while it holds a key (a session
    // that holds and waits for nothing leaves no trace in the lock log: its end comes with the
    // next keepalive answer): the end is pushed, once.
    old.acquire(3, &at, a, "k2").await;
    let close = proto::CloseSessionRequest {
        session_id: a,
        session_secret: secret_of(&at, a),
    };
    lock(&at).await.unwrap().close_session(close).await.unwrap();
    let pushed = subscribed.push().await;
    assert_eq!(pushed.session_id, a);
    let Some(session_event::Kind::Ended(ended)) = pushed.kind else {
        panic!("the session's end: {pushed:?}");
    };
    assert_eq!(ended.cause, i32::from(proto::ReleaseCause::SessionClosed));
    assert_eq!(ended.force_release_id, 0);

    // The keepalive answers still say the same, on every stream; nothing else was pushed.
    let (Out::KeepAlive(after), before) = subscribed.call(3, keepalive_of(&at, a, 3)).await else {
        panic!("a keepalive answer");
    };
    assert!(after.lost, "{after:?}");
    assert!(before.is_empty(), "one push per fact: {before:?}");
    let (Out::KeepAlive(after), before) = old.call(4, keepalive_of(&at, a, 4)).await else {
        panic!("a keepalive answer");
    };
    assert!(after.lost, "{after:?}");
    no_pushes(&before);
    wrong.seq = 3;
    let (_, before) = stranger.call(3, In::KeepAlive(wrong)).await;
    no_pushes(&before);
}

fn keepalive_of(at: &str, session: u64, seq: u64) -> In {
    In::KeepAlive(proto::KeepAliveRequest {
        session_id: session,
        seq,
        session_secret: secret_of(at, session),
    })
}
