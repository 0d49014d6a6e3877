//! The peer transport over real loopback TCP (and TLS): framing, the handshake and its refusals,
//! heartbeats and the read deadline, reconnection, mutual TLS.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use picket_core::paxos::{Message, NodeId};
use picket_proto::proto::peer_frame::Kind;
use picket_proto::proto::{self, PeerFrame};
use picket_proto::{PEER_MESSAGE_BYTES_MAX, PEER_PROTOCOL_VERSION};
use prost::Message as _;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

use super::conn::Conn;
use super::frame::{self, check_answer, check_hello, FrameReader, FrameWriter, PeerLink};
use super::*;
use crate::node::driver::{detached_handle, NodeMessage, PeerInput};

/// The hello and its negotiation, checked without sockets.
mod hello;

/// Long enough that a test never waits for ever, never a measure of speed.
const PATIENCE: Duration = Duration::from_secs(20);

fn link(me: u64, cluster: &str) -> PeerLink {
    PeerLink {
        cluster_id: cluster.into(),
        me: NodeId(me),
        members: MemberSet::new((1..=3).map(NodeId)),
    }
}

/// Short clocks, so that the deadlines pass while the test waits.
fn fast() -> PeerTiming {
    PeerTiming {
        heartbeat: Duration::from_millis(20),
        read_deadline: Duration::from_millis(150),
        write_deadline: Duration::from_millis(1_000),
        handshake_timeout: Duration::from_millis(1_000),
        backoff_min: Duration::from_millis(5),
        backoff_max: Duration::from_millis(40),
    }
}

fn hello_frame(version: u32, cluster: &str, from: u64, to: u64) -> PeerFrame {
    frame::frame(Kind::Hello(proto::PeerHello {
        protocol_version: version,
        cluster_id: cluster.into(),
        from_node_id: from,
        to_node_id: to,
        ..proto::PeerHello::default()
    }))
}

fn hello_of(kind: Kind) -> proto::PeerHello {
    match kind {
        Kind::Hello(hello) => hello,
        other => panic!("expected a hello, got {other:?}"),
    }
}

fn pre_vote(round: u64) -> NodeMessage {
    Message::PreVote { round }
}

#[tokio::test]
async fn frames_round_trip_and_the_reader_refuses_what_is_not_a_whole_frame() {
    let (a, b) = tokio::io::duplex(1 << 20);
    let mut writer = FrameWriter::new(a);
    let frames = [
        hello_frame(1, "c", 1, 2),
        frame::frame(Kind::Message(
            picket_proto::convert::paxos::message_to_wire(pre_vote(7)),
        )),
        frame::frame(Kind::Ping(proto::PeerPing {})),
    ];
    for f in &frames {
        writer.push(f).unwrap();
    }
    // Four bytes of big-endian length, then the prost encoding, frame after frame.
    let first_len = frames[0].encoded_len();
    assert_eq!(
        writer.buffered(),
        frames.iter().map(|f| 4 + f.encoded_len()).sum::<usize>()
    );
    writer.flush().await.unwrap();
    drop(writer);
    let mut reader = FrameReader::new(b);
    let first = reader.next_frame().await.unwrap().unwrap();
    assert_eq!(first.len(), first_len);
    assert_eq!(PeerFrame::decode(&first[..]).unwrap(), frames[0]);
    for f in &frames[1..] {
        let bytes = reader.next_frame().await.unwrap().unwrap();
        assert_eq!(frame::decode(&bytes).unwrap(), f.kind.clone().unwrap());
    }
    // The end of the stream between frames.
    assert!(reader.next_frame().await.unwrap().is_none());

    // A length above the limit is refused before its bytes are read.
    let (mut a, b) = tokio::io::duplex(64);
    a.write_all(&(PEER_MESSAGE_BYTES_MAX as u32 + 1).to_be_bytes())
        .await
        .unwrap();
    let error = FrameReader::new(b).next_frame().await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
    // A stream that ends inside a frame.
    let (mut a, b) = tokio::io::duplex(64);
    a.write_all(&[0, 0, 0, 9, 1, 2]).await.unwrap();
    drop(a);
    let error = FrameReader::new(b).next_frame().await.unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::UnexpectedEof);
    // Bytes that are a frame but not a `PeerFrame`.
    assert!(frame::decode(&[0xff, 0xff]).is_err());
    assert_eq!(frame::decode(&[]).unwrap_err(), "peer_frame.kind: required");
}

struct Listening {
    addr: SocketAddr,
    delivered: mpsc::Receiver<PeerInput>,
    counters: Arc<PeerCounters>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

async fn listen_at(addr: SocketAddr, me: u64, timing: PeerTiming) -> Listening {
    listen_with(addr, me, timing, None).await
}

/// [`listen_at`], with `tls` as the TLS server end.
async fn listen_with(
    addr: SocketAddr,
    me: u64,
    timing: PeerTiming,
    tls: Option<crate::tls::PeerServerTls>,
) -> Listening {
    let listener = bind(addr).await.unwrap();
    let addr = listener.addr;
    let (driver, delivered) = detached_handle(NodeId(me), "c");
    let counters = Arc::new(PeerCounters::default());
    let (stop, stopped) = watch::channel(false);
    let inbound = Inbound {
        link: link(me, "c"),
        timing,
        driver,
        counters: counters.clone(),
        faults: picket_core::faults::Faults::NONE,
        tls,
    };
    let task = tokio::spawn(run_inbound(listener, inbound, stopped));
    Listening {
        addr,
        delivered,
        counters,
        stop,
        task,
    }
}

async fn listen(me: u64, timing: PeerTiming) -> Listening {
    listen_at("127.0.0.1:0".parse().unwrap(), me, timing).await
}

struct Dialing {
    queue: mpsc::Sender<NodeMessage>,
    counters: Arc<PeerCounters>,
    _stop: watch::Sender<bool>,
}

fn dial(me: u64, cluster: &str, to: u64, addr: SocketAddr, timing: PeerTiming) -> Dialing {
    dial_tls(me, cluster, to, addr, timing, None)
}

fn dial_tls(
    me: u64,
    cluster: &str,
    to: u64,
    addr: SocketAddr,
    timing: PeerTiming,
    tls: Option<crate::tls::PeerClientTls>,
) -> Dialing {
    let (queue, rx) = mpsc::channel(1_024);
    let counters = Arc::new(PeerCounters::default());
    let (stop, stopped) = watch::channel(false);
    let target = PeerTarget {
        to: NodeId(to),
        address: addr.to_string(),
        tls,
    };
    tokio::spawn(run_outbound(
        link(me, cluster),
        target,
        timing,
        rx,
        counters.clone(),
        stopped,
    ));
    Dialing {
        queue,
        counters,
        _stop: stop,
    }
}

/// Waits until `done` holds, panicking after [`PATIENCE`].
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Sends `msg` until one arrives (messages queued while the dialer is not connected are dropped).
async fn deliver_one(dialer: &Dialing, listener: &mut Listening, round: u64) -> PeerInput {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        assert!(tokio::time::Instant::now() < deadline, "nothing delivered");
        dialer.queue.send(pre_vote(round)).await.unwrap();
        let got = tokio::time::timeout(Duration::from_millis(50), listener.delivered.recv()).await;
        if let Ok(Some(input)) = got {
            return input;
        }
    }
}

#[tokio::test]
async fn messages_cross_one_connection_in_order_and_batched() {
    let mut listener = listen(2, PeerTiming::default()).await;
    let dialer = dial(1, "c", 2, listener.addr, PeerTiming::default());
    let first = deliver_one(&dialer, &mut listener, 0).await;
    assert_eq!(first.from, NodeId(1));
    for round in 1..=500 {
        dialer.queue.send(pre_vote(round)).await.unwrap();
    }
    let mut rounds = Vec::new();
    while rounds.len() < 500 {
        let input = tokio::time::timeout(PATIENCE, listener.delivered.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(input.from, NodeId(1));
        match input.msg {
            Message::PreVote { round } if round > 0 => rounds.push(round),
            Message::PreVote { .. } => {} // a retry of the first
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(rounds, (1..=500).collect::<Vec<_>>());
    let c = &dialer.counters;
    assert_eq!(PeerCounters::get(&c.connects), 1);
    assert!(PeerCounters::get(&c.messages_sent) >= 501);
    // Every flush writes what was queued: never more flushes than messages.
    assert!(PeerCounters::get(&c.flushes) <= PeerCounters::get(&c.messages_sent));
    assert_eq!(PeerCounters::get(&listener.counters.accepts), 1);
}

/// A connection of `me` to the listener: the handshake written, the answer read.
async fn raw_handshake(addr: SocketAddr, hello: PeerFrame) -> (Conn, Kind) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut conn = Conn::new(Box::new(tcp));
    conn.writer.push(&hello).unwrap();
    conn.writer.flush().await.unwrap();
    let answer = conn.reader.next_frame().await.unwrap().unwrap();
    (conn, frame::decode(&answer).unwrap())
}

#[tokio::test]
async fn a_listener_refuses_a_bad_hello_naming_the_rule_and_closes() {
    let listener = listen(2, fast()).await;
    let cases = [
        (
            hello_frame(PEER_PROTOCOL_VERSION + 1, "c", 1, 2),
            "peer_protocol_version",
        ),
        (
            hello_frame(PEER_PROTOCOL_VERSION, "other", 1, 2),
            "peer_cluster_id",
        ),
        (
            hello_frame(PEER_PROTOCOL_VERSION, "c", 1, 3),
            "peer_wrong_recipient",
        ),
        (
            hello_frame(PEER_PROTOCOL_VERSION, "c", 4, 2),
            "peer_not_a_member",
        ),
        (
            frame::frame(Kind::Ping(proto::PeerPing {})),
            "peer_handshake_first",
        ),
    ];
    for (hello, rule) in cases {
        let (mut conn, answer) = raw_handshake(listener.addr, hello).await;
        match answer {
            Kind::Refusal(refusal) => assert_eq!(refusal.rule, rule),
            other => panic!("expected a refusal ({rule}), got {other:?}"),
        }
        // ... and then the connection is closed.
        let next = tokio::time::timeout(PATIENCE, conn.reader.next_frame()).await;
        assert!(matches!(next, Ok(Ok(None)) | Ok(Err(_))), "{next:?}");
    }
    assert_eq!(PeerCounters::get(&listener.counters.handshakes_refused), 5);
    assert_eq!(PeerCounters::get(&listener.counters.accepts), 0);

    // Bytes that are no frame at all (an HTTP/2 preface, as a gRPC dialer would send).
    let mut tcp = tokio::net::TcpStream::connect(listener.addr).await.unwrap();
    tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    let mut conn = Conn::new(Box::new(tcp));
    let answer = conn.reader.next_frame().await.unwrap().unwrap();
    match frame::decode(&answer).unwrap() {
        Kind::Refusal(refusal) => assert_eq!(refusal.rule, "peer_handshake_first"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_dialer_of_another_cluster_is_refused_and_delivers_nothing() {
    let mut listener = listen(2, fast()).await;
    let dialer = dial(1, "other", 2, listener.addr, fast());
    eventually("the dialer hears the refusal twice", || {
        PeerCounters::get(&dialer.counters.handshakes_refused) >= 2
    })
    .await;
    dialer.queue.send(pre_vote(1)).await.unwrap();
    assert_eq!(PeerCounters::get(&dialer.counters.connects), 0);
    assert!(PeerCounters::get(&listener.counters.handshakes_refused) >= 2);
    assert!(listener.delivered.try_recv().is_err());
}

#[tokio::test]
async fn a_silent_dialer_is_closed_at_the_listeners_read_deadline() {
    let listener = listen(2, fast()).await;
    let (mut conn, answer) =
        raw_handshake(listener.addr, hello_frame(PEER_PROTOCOL_VERSION, "c", 1, 2)).await;
    assert_eq!(hello_of(answer).from_node_id, 2);
    // This end never writes again; the listener pings, then gives up on it.
    let mut pings = 0;
    loop {
        match tokio::time::timeout(PATIENCE, conn.reader.next_frame()).await {
            Ok(Ok(Some(bytes))) => {
                assert!(matches!(frame::decode(&bytes), Ok(Kind::Ping(_))));
                pings += 1;
            }
            Ok(Ok(None)) | Ok(Err(_)) => break,
            Err(_) => panic!("the listener never closed the silent connection"),
        }
    }
    assert!(pings >= 1, "the listener pings an idle connection");
    assert_eq!(PeerCounters::get(&listener.counters.connections_silent), 1);
}

#[tokio::test]
async fn a_dialer_whose_listener_goes_silent_dials_again() {
    // A fake listener that answers the handshake and then never writes (a stalled link).
    let fake = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = fake.local_addr().unwrap();
    let dialer = dial(1, "c", 2, addr, fast());
    let mut held = Vec::new();
    for _ in 0..2 {
        let (tcp, _) = tokio::time::timeout(PATIENCE, fake.accept())
            .await
            .unwrap()
            .unwrap();
        let mut conn = Conn::new(Box::new(tcp));
        let hello = conn.reader.next_frame().await.unwrap().unwrap();
        assert_eq!(hello_of(frame::decode(&hello).unwrap()).from_node_id, 1);
        conn.writer
            .push(&hello_frame(PEER_PROTOCOL_VERSION, "c", 2, 1))
            .unwrap();
        conn.writer.flush().await.unwrap();
        // Kept open and silent: only the dialer's read deadline can end it.
        held.push(conn);
    }
    assert!(PeerCounters::get(&dialer.counters.connections_silent) >= 1);
    eventually("the second connection counted", || {
        PeerCounters::get(&dialer.counters.connects) == 2
    })
    .await;
}

#[tokio::test]
async fn a_dialer_reconnects_when_its_listener_restarts() {
    let mut listener = listen(2, fast()).await;
    let addr = listener.addr;
    let dialer = dial(1, "c", 2, addr, fast());
    deliver_one(&dialer, &mut listener, 1).await;
    // The listener stops (its connections end), and later comes back on the same port.
    let Listening { stop, task, .. } = listener;
    stop.send(true).unwrap();
    task.await.unwrap();
    // Nobody listens for a while: what the dialer is given meanwhile is dropped and counted.
    eventually("a message for nobody is dropped", || {
        let _ = dialer.queue.try_send(pre_vote(9));
        PeerCounters::get(&dialer.counters.messages_dropped_unreachable) > 0
    })
    .await;
    let mut again = listen_at(addr, 2, fast()).await;
    let input = deliver_one(&dialer, &mut again, 2).await;
    assert_eq!(input.from, NodeId(1));
    assert!(PeerCounters::get(&dialer.counters.connects) >= 2);
}

/// Queued messages while nobody listens are dropped and counted, never kept without bound.
#[tokio::test]
async fn messages_for_an_unreachable_peer_are_dropped_and_counted() {
    let unused = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = unused.local_addr().unwrap();
    drop(unused);
    let dialer = dial(1, "c", 2, addr, fast());
    for round in 0..100 {
        dialer.queue.send(pre_vote(round)).await.unwrap();
    }
    eventually("the queue is dropped", || {
        PeerCounters::get(&dialer.counters.messages_dropped_unreachable) >= 100
    })
    .await;
    assert_eq!(PeerCounters::get(&dialer.counters.messages_sent), 0);
}

mod tls {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, SanType,
    };

    use super::*;
    use crate::tls::PeerTls;

    /// A CA and one replica certificate for 127.0.0.1 signed by it, as `[tls]` files.
    fn pki(dir: &std::path::Path, name: &str) -> crate::config::Tls {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, format!("{name}-ca"));
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let mut node = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        node.subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        node.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let node_key = KeyPair::generate().unwrap();
        let node_cert = node.signed_by(&node_key, &issuer).unwrap();
        let file = |f: &str, text: String| {
            let path = dir.join(format!("{name}-{f}"));
            std::fs::write(&path, text).unwrap();
            path
        };
        crate::config::Tls {
            cert: file("node.pem", node_cert.pem()),
            key: file("node.key", node_key.serialize_pem()),
            ca: file("ca.pem", ca_cert.pem()),
            require_client_cert: false,
            client_ca: None,
            client_principal_from: Default::default(),
            http: false,
            http_cert: None,
            http_key: None,
        }
    }

    async fn tls_listener(tls: &PeerTls) -> Listening {
        let addr = "127.0.0.1:0".parse().unwrap();
        listen_with(addr, 2, fast(), Some(tls.server())).await
    }

    #[tokio::test]
    async fn replicas_of_one_ca_talk_over_mutual_tls_and_a_stranger_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ours = PeerTls::load(Some(&pki(dir.path(), "ours")))
            .unwrap()
            .unwrap();
        let mut listener = tls_listener(&ours).await;

        // A replica of the same CA: messages flow.
        let address = listener.addr.to_string();
        let client = ours.client(&address).unwrap();
        let dialer = dial_tls(1, "c", 2, listener.addr, fast(), Some(client));
        let input = deliver_one(&dialer, &mut listener, 1).await;
        assert_eq!(input.from, NodeId(1));
        assert_eq!(PeerCounters::get(&dialer.counters.connects), 1);
        assert_eq!(PeerCounters::get(&listener.counters.accepts), 1);

        // A certificate of another CA (which trusts ours, so only the listener can refuse it):
        // the TLS handshake fails, no hello is answered, nothing is accepted.
        let mut stranger_files = pki(dir.path(), "stranger");
        stranger_files.ca = dir.path().join("ours-ca.pem");
        let stranger = PeerTls::load(Some(&stranger_files)).unwrap().unwrap();
        let tcp = tokio::net::TcpStream::connect(listener.addr).await.unwrap();
        let answered = match stranger.client(&address).unwrap().connect(tcp).await {
            Err(_) => false,
            Ok(tls) => {
                let mut conn = Conn::new(Box::new(tls));
                let hello = hello_frame(PEER_PROTOCOL_VERSION, "c", 3, 2);
                conn.writer.push(&hello).unwrap();
                let _ = conn.writer.flush().await;
                matches!(conn.reader.next_frame().await, Ok(Some(_)))
            }
        };
        assert!(
            !answered,
            "a certificate of another CA must not get a hello"
        );
        assert_eq!(PeerCounters::get(&listener.counters.accepts), 1);
        // The same stranger as a dialing replica: every dial fails in TLS, and counts.
        let refused = dial_tls(
            3,
            "c",
            2,
            listener.addr,
            fast(),
            Some(stranger.client(&address).unwrap()),
        );
        eventually("the stranger's dials fail twice", || {
            PeerCounters::get(&refused.counters.dials_failed) >= 2
        })
        .await;
        assert_eq!(PeerCounters::get(&refused.counters.connects), 0);
        assert_eq!(PeerCounters::get(&listener.counters.accepts), 1);

        // Plaintext on a TLS peer port gets nothing either.
        let tcp = tokio::net::TcpStream::connect(listener.addr).await.unwrap();
        let mut plain = Conn::new(Box::new(tcp));
        plain
            .writer
            .push(&hello_frame(PEER_PROTOCOL_VERSION, "c", 3, 2))
            .unwrap();
        plain.writer.flush().await.unwrap();
        let next = tokio::time::timeout(PATIENCE, plain.reader.next_frame()).await;
        assert!(
            !matches!(next, Ok(Ok(Some(ref b))) if frame::decode(b).is_ok()),
            "{next:?}"
        );
        assert_eq!(PeerCounters::get(&listener.counters.accepts), 1);
    }
}
