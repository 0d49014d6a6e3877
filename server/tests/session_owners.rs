//! Nobody acts on a session that is not theirs: against three real `picketd` processes with
//! OIDC on, attackers who know a victim's session id and lock token (both are public through
//! `watch`) try keepalive, acquire, release and close on it. Every call is refused with its
//! rule, and the victim's holds, the revision and the audit are unchanged.
//!
//! The attack is written against a [`Caller`] (a channel and an optional bearer token), so the
//! same suite runs with OIDC tokens and, separately, with mutual TLS (a `Caller` whose channel
//! carries a client certificate, the certificate's subject being the principal).

mod common;

use std::time::Duration;

use common::pki::Name;
use common::*;
use picket_proto::proto::{self, admin_client::AdminClient, lock_client::LockClient};
use picket_proto::secret::SessionSecret;
use picket_proto::status::error_detail;
use tonic::transport::Channel;
use tonic::{Request, Status};

const NS: &str = "orders";
const KEY: &str = "order/30";

/// How one party reaches the cluster: a channel to the leader and, with OIDC, a bearer token.
#[derive(Clone)]
struct Caller {
    channel: Channel,
    bearer: Option<String>,
}

impl Caller {
    /// A caller over TLS that trusts the test CA and presents `cert` (or no certificate).
    /// Lazy: a connection the server refuses shows on the first call, as a client sees it.
    fn connect_tls(endpoint: &str, ca: &std::path::Path, cert: Option<&pki::Pem>) -> Caller {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(
            std::fs::read(ca).expect("the test CA"),
        ));
        if let Some(pem) = cert {
            let (cert, key) = (std::fs::read(&pem.cert), std::fs::read(&pem.key));
            tls = tls.identity(Identity::from_pem(cert.unwrap(), key.unwrap()));
        }
        let channel = Channel::from_shared(endpoint.to_owned())
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .timeout(Duration::from_secs(5))
            .connect_lazy();
        Caller {
            channel,
            bearer: None,
        }
    }

    async fn connect(endpoint: &str, bearer: Option<String>) -> Caller {
        let channel = Channel::from_shared(endpoint.to_owned())
            .unwrap()
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap();
        Caller { channel, bearer }
    }

    fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        if let Some(token) = &self.bearer {
            let value = format!("Bearer {token}").parse().unwrap();
            request.metadata_mut().insert("authorization", value);
        }
        request
    }

    fn lock(&self) -> LockClient<Channel> {
        LockClient::new(self.channel.clone())
    }

    fn admin(&self) -> AdminClient<Channel> {
        AdminClient::new(self.channel.clone())
    }

    /// Sends `entries` on one keepalive stream; answers one response per entry.
    async fn keepalives(
        &self,
        entries: Vec<proto::KeepAliveRequest>,
    ) -> Result<Vec<proto::KeepAliveResponse>, Status> {
        let count = entries.len();
        let (tx, rx) = tokio::sync::mpsc::channel(count.max(1));
        for entry in entries {
            tx.send(entry).await.unwrap();
        }
        let stream = picket_server::api::stream::ChannelStream::new(rx);
        let mut responses = self
            .lock()
            .keep_alive(self.request(stream))
            .await?
            .into_inner();
        let mut answers = Vec::new();
        while answers.len() < count {
            match responses.message().await? {
                Some(answer) => answers.push(answer),
                None => break,
            }
        }
        drop(tx);
        Ok(answers)
    }
}

/// The session under attack: its id, its secret (known to its owner only), its hold.
struct Victim {
    caller: Caller,
    session: u64,
    secret: Vec<u8>,
    token: u64,
}

/// One attacker: how it calls, the secret it sends, and the rule every call must meet.
struct Attacker {
    name: &'static str,
    caller: Caller,
    secret: Vec<u8>,
    rule: &'static str,
}

/// What must not change: the namespace's holds, the revision, the namespace's audit.
#[derive(Debug, PartialEq)]
struct Evidence {
    revision: u64,
    holds: Vec<(u64, u64)>,
    audit: Vec<proto::AuditRecord>,
}

async fn evidence(observer: &Caller) -> Evidence {
    // Reads through the leader: under load an election may pass while the test runs, and
    // "no leader is known" then is a reason to read again, not evidence.
    for _ in 0..100 {
        match read_evidence(observer).await {
            Ok(evidence) => return evidence,
            Err(status) if status.code() == tonic::Code::Unavailable => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(status) => panic!("reading the evidence: {status}"),
        }
    }
    panic!("no leader answered the evidence reads within 10 s");
}

async fn read_evidence(observer: &Caller) -> Result<Evidence, Status> {
    let holds = observer
        .admin()
        .list_holds(observer.request(proto::ListHoldsRequest {
            namespace: NS.into(),
            limit: 0,
            allow_stale: false,
        }))
        .await?
        .into_inner();
    let audit = observer
        .admin()
        .query_audit(observer.request(proto::QueryAuditRequest {
            namespace: Some(NS.into()),
            ..proto::QueryAuditRequest::default()
        }))
        .await?
        .into_inner();
    Ok(Evidence {
        revision: holds.revision,
        holds: holds
            .holds
            .iter()
            .map(|h| (h.session_id, h.token))
            .collect(),
        audit: audit.records,
    })
}

/// Opens the victim's session (with its own secret) and takes the key.
async fn open_victim(caller: Caller) -> Victim {
    let secret = SessionSecret::generate().as_bytes().to_vec();
    let created = caller
        .lock()
        .create_session(caller.request(proto::CreateSessionRequest {
            ttl_ms: Some(30_000),
            identity: Some(proto::ClientIdentity {
                name: "billing".into(),
                host: "h1".into(),
                pid: 7,
            }),
            session_secret: secret.clone(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert!(
        created.session_secret.is_empty(),
        "a client-chosen secret is never sent back"
    );
    let request = try_acquire_request(created.session_id, 1, NS, KEY, secret.clone());
    let acquired = caller
        .lock()
        .acquire(caller.request(request))
        .await
        .unwrap()
        .into_inner();
    let Some(proto::acquire_reply::Kind::Granted(granted)) = acquired.reply.and_then(|r| r.kind)
    else {
        panic!("the victim did not get the key")
    };
    Victim {
        caller,
        session: created.session_id,
        secret,
        token: granted.token,
    }
}

fn rule_of(result: Result<impl std::fmt::Debug, Status>, call: &str, attacker: &str) -> String {
    match result {
        Ok(answer) => panic!("{attacker}: {call} was answered: {answer:?}"),
        Err(status) => status_rule(&status),
    }
}

/// The refusal's rule; [`REFUSED_BY_TLS`] when the TLS layer refused the connection (no gRPC
/// answer at all, so no detail).
fn status_rule(status: &Status) -> String {
    match error_detail(status) {
        Some(detail) => detail.rule,
        // The transport's own failures (the connection was closed or never worked): never a
        // gRPC answer.
        None if matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
        ) =>
        {
            REFUSED_BY_TLS.to_owned()
        }
        None => format!("no detail: {status:?}"),
    }
}

/// What a call without a client certificate meets under mutual TLS: the handshake is refused,
/// so the call never reaches Picket's services.
const REFUSED_BY_TLS: &str = "(refused by the TLS layer)";

/// Every call an attacker can make on the victim's session, with the victim's id and token;
/// answers (call, rule) for each.
async fn attack(attacker: &Attacker, victim: &Victim) -> Vec<(&'static str, String)> {
    let (caller, secret, name) = (&attacker.caller, &attacker.secret, attacker.name);
    let mut rules = Vec::new();
    let keepalive = proto::KeepAliveRequest {
        session_id: victim.session,
        seq: 1,
        session_secret: secret.clone(),
    };
    // Without credentials the stream itself is refused; otherwise the entry is answered alone.
    let rule = match caller.keepalives(vec![keepalive]).await {
        Err(status) => status_rule(&status),
        Ok(answers) => {
            let answer = answers.first().expect("the entry is answered");
            assert_eq!(
                (answer.ttl_ms, answer.lost),
                (0, false),
                "{name}: {answer:?}"
            );
            answer
                .error
                .as_ref()
                .map(|e| e.rule.clone())
                .unwrap_or_default()
        }
    };
    rules.push(("keepalive", rule));
    // The victim's own request id (a "retry") and a fresh one for another key.
    for (request_id, key) in [(1, KEY), (1_000, "order/31")] {
        let request = try_acquire_request(victim.session, request_id, NS, key, secret.clone());
        let acquire = caller.lock().acquire(caller.request(request)).await;
        rules.push(("acquire", rule_of(acquire, "acquire", name)));
    }
    let release = caller
        .lock()
        .release(caller.request(proto::ReleaseRequest {
            session_id: victim.session,
            request_id: 1_001,
            namespace: NS.into(),
            key: KEY.into(),
            token: victim.token,
            session_secret: secret.clone(),
        }))
        .await;
    rules.push(("release", rule_of(release, "release", name)));
    let close = caller
        .lock()
        .close_session(caller.request(proto::CloseSessionRequest {
            session_id: victim.session,
            session_secret: secret.clone(),
        }))
        .await;
    rules.push(("close", rule_of(close, "close", name)));
    rules
}

async fn assert_attacks_refused(attackers: &[Attacker], victim: &Victim, observer: &Caller) {
    let before = evidence(observer).await;
    assert_eq!(before.holds, vec![(victim.session, victim.token)]);
    for attacker in attackers {
        let rules = attack(attacker, victim).await;
        for (call, rule) in &rules {
            assert_eq!(
                rule, attacker.rule,
                "{}: {call} refused with the wrong rule",
                attacker.name
            );
        }
        assert_eq!(rules.len(), 5, "{}: every call was tried", attacker.name);
        assert_eq!(
            evidence(observer).await,
            before,
            "{}: the attack changed something",
            attacker.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_oidc_nobody_acts_on_another_principals_session() {
    // Every call goes to the leader found now: slower elections keep it there on a loaded machine
    // (CI once saw `not_leader` from a leader change mid-test).
    let cluster = OidcCluster::start_with(Options {
        election_timeout_ms: STABLE_ELECTIONS_MS,
        ..Options::default()
    });
    let leader = cluster.leader(Duration::from_secs(20)).await;
    let endpoint = &cluster.endpoints[leader];
    let alice = Caller::connect(endpoint, Some(cluster.token("alice", &["picket-client"]))).await;
    let victim = open_victim(alice.clone()).await;
    let guessed = SessionSecret::generate().as_bytes().to_vec();
    let attackers = [
        Attacker {
            // Lock calls need a lock-client role with OIDC on: refused before any session.
            name: "no credentials",
            caller: Caller::connect(endpoint, None).await,
            secret: guessed.clone(),
            rule: "missing_token",
        },
        Attacker {
            // Even with the victim's secret (leaked): another principal is refused.
            name: "another principal's valid token",
            caller: Caller::connect(endpoint, Some(cluster.token("mallory", &["picket-client"])))
                .await,
            secret: victim.secret.clone(),
            rule: "session_not_yours",
        },
        Attacker {
            name: "the right principal with a wrong secret",
            caller: Caller::connect(endpoint, Some(cluster.token("alice", &["picket-client"])))
                .await,
            secret: guessed,
            rule: "session_not_yours",
        },
    ];
    let observer = Caller::connect(endpoint, Some(cluster.token("olivia", &[]))).await;
    assert_attacks_refused(&attackers, &victim, &observer).await;

    // A malformed entry is answered on its own; the stream and the victim's keepalive go on.
    let entry = |session_id, seq, secret: &[u8]| proto::KeepAliveRequest {
        session_id,
        seq,
        session_secret: secret.to_vec(),
    };
    let answers = victim
        .caller
        .keepalives(vec![
            entry(0, 1, &victim.secret),
            entry(victim.session, 2, &[]),
            entry(victim.session, 3, &victim.secret),
        ])
        .await
        .unwrap();
    let summary: Vec<(u64, String, String, u64)> = answers
        .iter()
        .map(|a| {
            let error = a.error.clone().unwrap_or_default();
            (a.seq, error.rule, error.field, a.ttl_ms)
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                1,
                "invalid_argument".into(),
                "keep_alive.session_id".into(),
                0
            ),
            (
                2,
                "invalid_argument".into(),
                "keep_alive.session_secret".into(),
                0
            ),
            (3, String::new(), String::new(), 30_000),
        ]
    );

    // The owner still acts on its session: release, then close.
    let release = victim
        .caller
        .lock()
        .release(victim.caller.request(proto::ReleaseRequest {
            session_id: victim.session,
            request_id: 2,
            namespace: NS.into(),
            key: KEY.into(),
            token: victim.token,
            session_secret: victim.secret.clone(),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(release.token, victim.token);
    victim
        .caller
        .lock()
        .close_session(victim.caller.request(proto::CloseSessionRequest {
            session_id: victim.session,
            session_secret: victim.secret.clone(),
        }))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_mutual_tls_nobody_acts_on_another_principals_session() {
    // Every verified certificate may lock (`certificate_roles` defaults to picket-client).
    let cluster = OidcCluster::start_with(Options {
        election_timeout_ms: STABLE_ELECTIONS_MS,
        ..Options::mtls(String::new())
    });
    let leader = cluster.leader(Duration::from_secs(20)).await;
    let endpoint = &cluster.endpoints[leader];
    let pki = cluster.pki.as_ref().unwrap();
    let svc = pki.client("svc", Name::Uri("spiffe://picket.test/svc/billing"));
    let mallory = pki.client("mallory", Name::Cn("mallory"));
    let olivia = pki.client("olivia", Name::Dns("olivia.ops.picket.test"));
    let owner = Caller::connect_tls(endpoint, &pki.ca, Some(&svc));
    let victim = open_victim(owner).await;
    let guessed = SessionSecret::generate().as_bytes().to_vec();
    let attackers = [
        Attacker {
            name: "no client certificate",
            caller: Caller::connect_tls(endpoint, &pki.ca, None),
            secret: guessed.clone(),
            rule: REFUSED_BY_TLS,
        },
        Attacker {
            // Even with the victim's secret (leaked): another certificate's principal is refused.
            name: "another principal's valid certificate",
            caller: Caller::connect_tls(endpoint, &pki.ca, Some(&mallory)),
            secret: victim.secret.clone(),
            rule: "session_not_yours",
        },
        Attacker {
            name: "the right certificate with a wrong secret",
            caller: Caller::connect_tls(endpoint, &pki.ca, Some(&svc)),
            secret: guessed,
            rule: "session_not_yours",
        },
    ];
    let observer = Caller::connect_tls(endpoint, &pki.ca, Some(&olivia));
    assert_attacks_refused(&attackers, &victim, &observer).await;
}
