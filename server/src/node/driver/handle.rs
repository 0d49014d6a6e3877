//! How the rest of the server reaches the driver: the requests it takes, the handle that sends
//! them (and peer messages), and the views it answers with (node status, member endpoints).

use super::*;

/// Bounds of the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DriverLimits {
    /// Client requests queued for the driver at most (beyond: `busy`). (The bound of waiting
    /// `Acquire` calls is the node's: `NodeConfig::waits_pending_max`.)
    pub requests_queued_max: usize,
    /// Peer messages queued for the driver at most (beyond: dropped and counted).
    pub peer_inbound_max: usize,
}

impl Default for DriverLimits {
    fn default() -> Self {
        DriverLimits {
            requests_queued_max: 10_000,
            peer_inbound_max: 16_384,
        }
    }
}

/// What a proposal came to: the state machine's outcome and the revision after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answered {
    pub outcome: Outcome,
    pub revision: Revision,
}

/// Where the driver sends one request's answer, or why it refused it (`api/` alone turns a
/// [`Refusal`] into a gRPC status).
pub(crate) type Responder<T> = oneshot::Sender<Result<T, Refusal>>;

/// A request from a gRPC handler.
#[derive(Debug)]
pub enum Request {
    /// Propose a command (for a waiting `Acquire`, with how long its answer waits for the
    /// grant: [`Proposal::answer_within_ms`]).
    Propose {
        proposal: Proposal,
        reply: Responder<Answered>,
    },
    /// A keepalive of a caller that presented `proof` (checked against the applied state):
    /// answers the TTL and the holds the session lost to force-release (for its client).
    KeepAlive {
        session: SessionId,
        proof: SessionProof,
        reply: oneshot::Sender<Result<(u64, Vec<LostHold>), KeepAliveError>>,
    },
    /// A read: linearizable (read-index on the leader) unless `stale`.
    Read {
        query: Query,
        stale: bool,
        reply: Responder<(Revision, Answer)>,
    },
    /// A page of the watch log (served from this replica's applied state).
    Watch {
        from: Revision,
        filter: WatchFilter,
        limit: usize,
        reply: oneshot::Sender<Result<WatchPage, WatchError>>,
    },
    Status {
        reply: oneshot::Sender<NodeStatus>,
    },
    /// A membership change (leader only), answered once the log chose it.
    ChangeMembership {
        request: ChangeRequest,
        reply: Responder<MembershipChanged>,
    },
}

/// How the driver reaches the members: a queue into a new outbound connection to an address,
/// the client endpoint of one (`server.rs`: the peer transport), and the config file's
/// `[[members]]`, a contact list (the addresses of members whose membership in the log carries
/// none, as one written before addresses were recorded for every member).
pub trait PeerDialer: Send {
    fn dial(&mut self, address: &MemberAddress) -> mpsc::Sender<NodeMessage>;
    fn endpoint(&self, address: &MemberAddress) -> String;
    /// The HTTP base URL of one (`None`: it has no HTTP address).
    fn http_endpoint(&self, address: &MemberAddress) -> Option<String>;
    /// The config file's members (this replica aside), with their addresses.
    fn contacts(&self) -> &BTreeMap<NodeId, MemberAddress>;
}

/// `http://host:port` of each member's HTTP listener, by node id: the config file's
/// (`Config::http_endpoints`) and, kept in step by the driver, those of the members the log
/// added ([`DriverHandle::http_endpoints`]).
/// Shared: every clone sees the driver's updates.
#[derive(Clone, Debug, Default)]
pub struct HttpEndpoints(pub(super) Arc<RwLock<BTreeMap<u64, String>>>);

impl HttpEndpoints {
    pub fn new(endpoints: BTreeMap<u64, String>) -> HttpEndpoints {
        HttpEndpoints(Arc::new(RwLock::new(endpoints)))
    }

    /// The HTTP base URL of `node`, if it has one.
    pub fn get(&self, node: u64) -> Option<String> {
        self.0
            .read()
            .expect("HTTP endpoints poisoned")
            .get(&node)
            .cloned()
    }

    /// Every member's HTTP base URL known now, by node id.
    pub fn all(&self) -> BTreeMap<u64, String> {
        self.0.read().expect("HTTP endpoints poisoned").clone()
    }

    pub(super) fn insert(&self, node: u64, endpoint: String) {
        self.0
            .write()
            .expect("HTTP endpoints poisoned")
            .insert(node, endpoint);
    }
}

/// A snapshot of the node's condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    pub id: NodeId,
    pub role: RoleKind,
    pub leader: Option<NodeId>,
    pub ready_leader: bool,
    pub revision: Revision,
    /// The last slot applied to the state machine.
    pub slot_applied: u64,
    pub boot: u64,
    pub counters: DriverCounters,
    /// How recovery ended and whether the durable state is still lost.
    pub storage: StorageCondition,
    /// The newest membership the log scheduled, and the first slot it governs (the
    /// configuration's revision).
    pub membership: Membership,
    pub membership_from: u64,
    /// Leader: the last slot each member said it applied (learner lag).
    pub members_applied: BTreeMap<NodeId, u64>,
    /// The cluster version the applied log is at (docs/upgrades.md).
    pub cluster_version: u32,
}

impl NodeStatus {
    /// Every member of the newest membership with its client endpoint (as `endpoint_of`
    /// knows it), voter flag and, on the leader, the last slot it said it applied.
    pub fn members(&self, endpoint_of: impl Fn(NodeId) -> Option<String>) -> Vec<MemberView> {
        self.membership
            .members()
            .map(|id| MemberView {
                id,
                client_endpoint: endpoint_of(id).unwrap_or_default(),
                voter: self.membership.is_voter(id),
                // Answered by the leader only (admin.proto, `Member.slot_applied`): a
                // follower knows no other member's progress, and fills in none, its own neither.
                slot_applied: match (self.role, id == self.id) {
                    (RoleKind::Leader, true) => Some(self.slot_applied),
                    (RoleKind::Leader, false) => self.members_applied.get(&id).copied(),
                    (_, _) => None,
                },
            })
            .collect()
    }
}

/// One member as status pages show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    pub id: NodeId,
    pub client_endpoint: String,
    pub voter: bool,
    pub slot_applied: Option<u64>,
}

impl NodeStatus {
    /// Why this replica does not serve, in words; `None`: it serves (`GET /healthz` 200, and
    /// `ready` in `Admin.GetReplicaStatus`).
    pub fn not_serving_because(&self) -> Option<&'static str> {
        match (self.role, self.leader) {
            (RoleKind::Recovering, _) => {
                Some("recovering: re-learning its state from the other replicas")
            }
            (RoleKind::Removed, _) => {
                Some("removed: not a member of the cluster's newest membership (stop this replica)")
            }
            (_, None) => Some("no leader known"),
            _ => None,
        }
    }
}

/// Counters for metrics and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverCounters {
    pub turns: u64,
    pub persist_ops: u64,
    pub group_commits: u64,
    pub messages_sent: u64,
    /// Outbound messages dropped because a peer's queue was full.
    pub messages_dropped_out: u64,
    pub proposals: u64,
    /// Slots of log that compactions cut and the driver freed off its turn (`free_retired`).
    pub retired_slots_freed: u64,
    /// Group commits the simulation's buggify point made slow (`Faults::buggify`; always 0
    /// outside the simulation).
    pub slow_fsyncs: u64,
}

/// A peer message for the driver.
#[derive(Debug)]
pub struct PeerInput {
    pub from: NodeId,
    pub msg: NodeMessage,
}

/// How the gRPC side reaches the driver. Cheap to clone.
#[derive(Clone, Debug)]
pub struct DriverHandle {
    pub(super) requests: mpsc::Sender<Request>,
    pub(super) peer_in: mpsc::Sender<PeerInput>,
    pub(super) applied: watch::Receiver<Revision>,
    /// `(revision, state digest)` after applies, computed only while someone subscribes.
    pub(super) digests: broadcast::Sender<(Revision, u64)>,
    pub(super) endpoints: Arc<RwLock<BTreeMap<NodeId, String>>>,
    pub(super) http_endpoints: HttpEndpoints,
    pub id: NodeId,
    pub cluster_id: Arc<str>,
}

impl DriverHandle {
    /// Hands a request to the driver; refused when its queue is full or it stopped.
    pub fn submit(&self, request: Request) -> Result<(), Refusal> {
        self.requests.try_send(request).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => Refusal::QueueFull,
            mpsc::error::TrySendError::Closed(_) => Refusal::Stopping,
        })
    }

    /// Sends a request built around a fresh oneshot and awaits its answer.
    pub async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Result<T, Refusal> {
        let (tx, rx) = oneshot::channel();
        self.submit(make(tx))?;
        rx.await.map_err(|_| Refusal::StoppedBeforeAnswer)
    }

    /// Hands a peer message to the driver; `false` if it was dropped (queue full or stopped).
    pub fn peer_message(&self, input: PeerInput) -> bool {
        self.peer_in.try_send(input).is_ok()
    }

    /// The applied revision, updated by the driver (watchers wait on it).
    pub fn applied(&self) -> watch::Receiver<Revision> {
        self.applied.clone()
    }

    /// `(revision, LockStateMachine::digest)` after every apply while subscribed (the digest
    /// costs O(state), so nothing is computed without a subscriber): replicas at the same
    /// revision must agree. A slow subscriber misses values (`Lagged`), never slows the driver.
    pub fn subscribe_digests(&self) -> broadcast::Receiver<(Revision, u64)> {
        self.digests.subscribe()
    }

    /// The client endpoint of every member known (this replica included: its config file's
    /// and those the log added), by id.
    pub fn endpoints(&self) -> BTreeMap<NodeId, String> {
        self.endpoints.read().expect("endpoints poisoned").clone()
    }

    /// The HTTP base URL of every member known (the config file's and those the log added),
    /// by node id, shared: the HTTP forwarding and the console read it as it changes.
    pub fn http_endpoints(&self) -> HttpEndpoints {
        self.http_endpoints.clone()
    }

    /// The client endpoint of a member.
    pub fn endpoint_of(&self, node: NodeId) -> Option<String> {
        self.endpoints
            .read()
            .expect("endpoints poisoned")
            .get(&node)
            .cloned()
    }

    /// The `NotLeader` refusal for a leader hint.
    pub fn not_leader(&self, leader: Option<NodeId>) -> Refusal {
        Refusal::NotLeader(LeaderHint::for_node(leader, |n| self.endpoint_of(n)))
    }
}

/// Transport tests: a handle with no driver behind it, whose peer messages come out of the
/// receiver (requests are refused: their queue is closed).
#[cfg(test)]
pub(crate) fn detached_handle(
    id: NodeId,
    cluster_id: &str,
) -> (DriverHandle, mpsc::Receiver<PeerInput>) {
    let (peer_in, peer_rx) = mpsc::channel(DriverLimits::default().peer_inbound_max);
    let handle = DriverHandle {
        requests: mpsc::channel(1).0,
        peer_in,
        applied: watch::channel(Revision(0)).1,
        digests: broadcast::channel(1).0,
        endpoints: Arc::default(),
        http_endpoints: HttpEndpoints::default(),
        id,
        cluster_id: cluster_id.into(),
    };
    (handle, peer_rx)
}
