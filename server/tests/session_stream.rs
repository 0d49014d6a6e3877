//! End-to-end: the `Session` stream (docs/api.md, "The session stream") through a raw tonic
//! client against three real `picketd` processes. Keepalives, acquires, releases, cancels and
//! closes of two sessions share one stream; a queued Acquire is answered when it is granted while
//! later requests on the stream are answered meanwhile; refusals carry exactly the
//! `google.rpc.Status` of the unary call; a follower answers `not_leader` with the hint; a wrong
//! secret or principal is `session_not_yours`; the per-stream bound answers `busy`, naming it.
#![cfg(not(madsim))]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use picket_proto::proto::{
    self, session_request::Request as In, session_response::Response as Out,
};
use picket_proto::session_stream::status_from_proto;
use picket_proto::status::{error_detail, leader_hint};
use picket_server::api::stream::ChannelStream;
use prost::Message;
use support::*;
use tokio::sync::mpsc;
use tonic::{Code, Status, Streaming};

const NS: &str = "orders";
const ELECTION: Duration = Duration::from_secs(10);
/// The bound of requests in flight per stream in this cluster.
const IN_FLIGHT_MAX: usize = 2;

/// One `Session` stream, with the answers that arrived before they were asked for.
struct Stream {
    tx: mpsc::Sender<proto::SessionRequest>,
    rx: Streaming<proto::SessionResponse>,
    early: BTreeMap<u64, Out>,
}

impl Stream {
    async fn open(endpoint: &str, principal: Option<&str>) -> Stream {
        let (tx, rx) = mpsc::channel(16);
        let mut request = tonic::Request::new(ChannelStream::new(rx));
        if let Some(principal) = principal {
            let value = principal.parse().unwrap();
            request.metadata_mut().insert("x-picket-principal", value);
        }
        let mut client = lock(endpoint).await.unwrap();
        let rx = client.session(request).await.unwrap().into_inner();
        Stream {
            tx,
            rx,
            early: BTreeMap::new(),
        }
    }

    async fn send(&self, seq: u64, request: In) {
        let message = proto::SessionRequest {
            seq,
            request: Some(request),
        };
        self.tx.send(message).await.unwrap();
    }

    /// The answer to `seq` (others that arrive first are kept for later).
    async fn answer(&mut self, seq: u64) -> Out {
        if let Some(answer) = self.early.remove(&seq) {
            return answer;
        }
        loop {
            let next = tokio::time::timeout(Duration::from_secs(20), self.rx.message())
                .await
                .unwrap_or_else(|_| panic!("no answer to seq {seq} within 20 s"))
                .unwrap()
                .expect("the stream goes on");
            let response = next.response.expect("an answer has a body");
            if next.seq == seq {
                return response;
            }
            assert!(
                self.early.insert(next.seq, response).is_none(),
                "seq {} answered twice",
                next.seq
            );
        }
    }

    async fn call(&mut self, seq: u64, request: In) -> Out {
        self.send(seq, request).await;
        self.answer(seq).await
    }

    fn answered(&self, seq: u64) -> bool {
        self.early.contains_key(&seq)
    }
}

fn refused(out: Out) -> Status {
    match out {
        Out::Error(error) => status_from_proto(&error),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn stream_rule(out: Out) -> (Code, String) {
    let status = refused(out);
    (status.code(), rule(&status))
}

fn token_of(out: Out) -> u64 {
    match out {
        Out::Acquire(response) => granted(&response).unwrap_or_else(|| panic!("{response:?}")),
        other => panic!("expected an acquire answer, got {other:?}"),
    }
}

fn keepalive(session: u64, seq: u64, secret: Vec<u8>) -> In {
    In::KeepAlive(proto::KeepAliveRequest {
        session_id: session,
        seq,
        session_secret: secret,
    })
}

fn acquire(at: &str, session: u64, request_id: u64, key: &str, wait_ms: u64) -> In {
    In::Acquire(acquire_message(at, session, request_id, key, wait_ms))
}

fn acquire_message(
    at: &str,
    session: u64,
    request_id: u64,
    key: &str,
    wait_ms: u64,
) -> proto::AcquireRequest {
    proto::AcquireRequest {
        wait_ms,
        ..try_acquire_request(session, request_id, NS, key, secret_of(at, session))
    }
}

fn release_message(
    at: &str,
    session: u64,
    request_id: u64,
    key: &str,
    token: u64,
) -> proto::ReleaseRequest {
    proto::ReleaseRequest {
        session_id: session,
        request_id,
        namespace: NS.into(),
        key: key.into(),
        token,
        session_secret: secret_of(at, session),
    }
}

/// Waits until `key`'s queue at `at` is `want`.
async fn eventually_waiting(at: &str, key: &str, want: &[u64]) {
    for _ in 0..500 {
        let info = inspect(at, NS, key, false).await.unwrap();
        let now: Vec<u64> = info.waiters.iter().map(|w| w.session_id).collect();
        if now == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{key}: the waiters never became {want:?}");
}

/// A session created by `principal` (dev metadata): its id and secret.
async fn create_session_as(at: &str, principal: &str) -> (u64, Vec<u8>) {
    let secret = picket_proto::secret::SessionSecret::generate()
        .as_bytes()
        .to_vec();
    let mut request = tonic::Request::new(proto::CreateSessionRequest {
        ttl_ms: Some(10_000),
        identity: Some(proto::ClientIdentity {
            name: principal.into(),
            host: "test".into(),
            pid: 1,
        }),
        session_secret: secret.clone(),
    });
    let value = principal.parse().unwrap();
    request.metadata_mut().insert("x-picket-principal", value);
    let mut client = lock(at).await.unwrap();
    let created = client.create_session(request).await.unwrap().into_inner();
    (created.session_id, secret)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_stream_carries_every_request_of_two_sessions_by_the_unary_rules() {
    let extra = format!("[limits]\nsession_stream_requests_max = {IN_FLIGHT_MAX}\n");
    let cluster = Cluster::start_configured(false, &extra);
    let leader = cluster.leader(ELECTION).await;
    let at = cluster.endpoints[leader].clone();
    let a = create_session(&at, "stream-a", 10_000).await;
    let b = create_session(&at, "stream-b", 10_000).await;
    let mut stream = Stream::open(&at, None).await;

    // Keepalive: the unary stream's answer, echoing the keepalive's own seq.
    let Out::KeepAlive(renewed) = stream.call(1, keepalive(a, 77, secret_of(&at, a))).await else {
        panic!("a keepalive is answered by a keepalive answer");
    };
    assert_eq!(
        (renewed.session_id, renewed.seq, renewed.lost),
        (a, 77, false)
    );
    assert!(renewed.ttl_ms > 0 && renewed.error.is_none(), "{renewed:?}");

    // Try: a grants; b's try on the held key is Busy, naming the holder.
    let first = token_of(stream.call(2, acquire(&at, a, 1, "k", 0)).await);
    let Out::Acquire(busy) = stream.call(3, acquire(&at, b, 1, "k", 0)).await else {
        panic!("a try is answered by an acquire answer");
    };
    assert!(
        matches!(&busy.reply.and_then(|r| r.kind), Some(proto::acquire_reply::Kind::Busy(held)) if held.holder_session_id == a),
        "b's try must find the key held by a"
    );

    // b queues; meanwhile a keepalive and another acquire on the same stream are answered.
    stream.send(4, acquire(&at, b, 2, "k", 15_000)).await;
    let Out::KeepAlive(meanwhile) = stream.call(5, keepalive(b, 1, secret_of(&at, b))).await else {
        panic!("keepalive answer");
    };
    assert!(!meanwhile.lost && meanwhile.error.is_none());
    let other = token_of(stream.call(6, acquire(&at, b, 3, "other", 0)).await);
    assert!(
        !stream.answered(4),
        "the key is held: the wait cannot be answered yet"
    );

    // a releases: the answer names b as next, and b's queued Acquire is answered by the grant.
    let Out::Release(released) = stream
        .call(7, In::Release(release_message(&at, a, 2, "k", first)))
        .await
    else {
        panic!("release answer");
    };
    let next = released.next.expect("b was waiting");
    assert_eq!(next.session_id, b);
    let second = token_of(stream.answer(4).await);
    assert_eq!(second, next.token);
    assert!(
        second > first && other > first,
        "tokens rise: {first} {second} {other}"
    );

    // a queues behind b, then cancels: the cancel is answered, the held Acquire ends. (Requests
    // in flight together run concurrently: the cancel is sent once the wait is queued.)
    stream.send(8, acquire(&at, a, 3, "k", 15_000)).await;
    eventually_waiting(&at, "k", &[a]).await;
    let cancel = proto::CancelWaitRequest {
        session_id: a,
        namespace: NS.into(),
        key: "k".into(),
        session_secret: secret_of(&at, a),
    };
    let Out::CancelWait(cancelled) = stream.call(9, In::CancelWait(cancel)).await else {
        panic!("cancel answer");
    };
    assert!(
        cancelled.removed && cancelled.held_token.is_none(),
        "{cancelled:?}"
    );
    assert_eq!(
        stream_rule(stream.answer(8).await),
        (Code::Aborted, "wait_cancelled".to_owned())
    );

    // A refusal is the unary call's google.rpc.Status, byte for byte (a wrong token).
    let wrong = release_message(&at, b, 4, "k", second + 1_000);
    let on_stream = match stream.call(10, In::Release(wrong.clone())).await {
        Out::Error(error) => error,
        other => panic!("a wrong token is refused, got {other:?}"),
    };
    let mut unary = lock(&at).await.unwrap();
    let mut wrong_again = wrong;
    wrong_again.request_id = 5;
    let unary_status = unary.release(wrong_again).await.unwrap_err();
    assert_eq!(on_stream.encode_to_vec(), unary_status.details().to_vec());
    let from_stream = status_from_proto(&on_stream);
    assert_eq!(from_stream.code(), unary_status.code());
    assert_eq!(error_detail(&from_stream), error_detail(&unary_status));
    assert_eq!(rule(&from_stream), "wrong_token");

    // Malformed: refused naming the field, as the unary call does.
    let malformed = stream.call(11, acquire(&at, b, 0, "k2", 0)).await;
    let status = refused(malformed);
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().starts_with("acquire.request_id"),
        "{status:?}"
    );

    // A wrong secret: session_not_yours for an acquire and (as on KeepAlive) for a keepalive.
    let mut stolen = acquire_message(&at, b, 6, "k3", 0);
    stolen.session_secret = vec![0x11; 32];
    assert_eq!(
        stream_rule(stream.call(12, In::Acquire(stolen)).await),
        (Code::PermissionDenied, "session_not_yours".to_owned())
    );
    let Out::KeepAlive(refused_keepalive) = stream.call(13, keepalive(b, 2, vec![0x11; 32])).await
    else {
        panic!("keepalive answer");
    };
    assert_eq!(refused_keepalive.error.unwrap().rule, "session_not_yours");

    // A session of principal alice: acted on by alice's stream, refused on mallory's even with
    // the right secret.
    let (d, d_secret) = create_session_as(&at, "alice").await;
    let mut alice_acquire = acquire_message(&at, d, 1, "k4", 0);
    alice_acquire.session_secret = d_secret.clone();
    let mut mallory_acquire = alice_acquire.clone();
    mallory_acquire.request_id = 2;
    let mut mallory = Stream::open(&at, Some("mallory")).await;
    assert_eq!(
        stream_rule(mallory.call(1, In::Acquire(mallory_acquire)).await),
        (Code::PermissionDenied, "session_not_yours".to_owned())
    );
    let Out::KeepAlive(mallory_keepalive) = mallory.call(2, keepalive(d, 1, d_secret)).await else {
        panic!("keepalive answer");
    };
    assert_eq!(mallory_keepalive.error.unwrap().rule, "session_not_yours");
    let mut alice = Stream::open(&at, Some("alice")).await;
    token_of(alice.call(1, In::Acquire(alice_acquire)).await);

    // The bound of requests in flight: two waits held, a third request answered busy.
    let holder = token_of(stream.call(14, acquire(&at, a, 4, "full", 0)).await);
    stream.send(15, acquire(&at, b, 8, "full", 15_000)).await;
    eventually_waiting(&at, "full", &[b]).await;
    assert!(token_of(stream.call(16, acquire(&at, b, 9, "k16", 0)).await) > holder);
    let c = create_session(&at, "stream-c", 10_000).await;
    stream.send(17, acquire(&at, c, 1, "full", 15_000)).await;
    eventually_waiting(&at, "full", &[b, c]).await;
    // 15 and 17 wait: the bound is reached.
    let status = refused(stream.call(18, acquire(&at, c, 2, "free", 0)).await);
    assert_eq!(status.code(), Code::ResourceExhausted);
    assert_eq!(rule(&status), "busy");
    assert!(
        status.message().contains("session_stream_requests_max"),
        "{status:?}"
    );
    // Every kind counts, a release too: a's release goes by the unary call meanwhile.
    let busy_release = refused(
        stream
            .call(19, In::Release(release_message(&at, a, 5, "full", holder)))
            .await,
    );
    assert_eq!(rule(&busy_release), "busy");
    let handed = support::release(&at, a, 6, NS, "full", holder)
        .await
        .unwrap();
    assert_eq!(handed.next.map(|g| g.session_id), Some(b));
    assert!(token_of(stream.answer(15).await) > holder);

    // Close on the stream: b's holds go, c's wait on "full" is granted.
    let close = proto::CloseSessionRequest {
        session_id: b,
        session_secret: secret_of(&at, b),
    };
    let Out::CloseSession(closed) = stream.call(20, In::CloseSession(close)).await else {
        panic!("close answer");
    };
    assert_eq!(closed.holds_released, 4, "k, other, full and k16");
    assert!(token_of(stream.answer(17).await) > holder);

    // A follower answers each request not_leader, with the leader's endpoint as the hint.
    let follower = (leader + 1) % 3;
    let mut at_follower = Stream::open(&cluster.endpoints[follower], None).await;
    for (seq, request) in [
        (1, acquire(&at, c, 3, "k5", 0)),
        (2, keepalive(c, 1, secret_of(&at, c))),
    ] {
        let status = refused(at_follower.call(seq, request).await);
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(rule(&status), "not_leader");
        let hint = leader_hint(&status).expect("a hint");
        assert_eq!(hint.endpoint.as_deref(), Some(at.as_str()));
    }
}
