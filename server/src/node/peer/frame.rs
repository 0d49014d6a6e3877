//! The peer protocol's frames (`peer.proto`, wire version 1): a 4-byte big-endian length and
//! that many bytes of one prost-encoded `PeerFrame`, read with tokio-util's
//! `LengthDelimitedCodec`; and the handshake's rules.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::{BufMut, BytesMut};
use picket_core::paxos::{Membership, NodeId, Slot};
use picket_proto::convert::records::{membership_from_wire, membership_to_wire};
use picket_proto::proto::peer_frame::Kind;
use picket_proto::proto::{self, PeerFrame};
use picket_proto::{PEER_MESSAGE_BYTES_MAX, PEER_PROTOCOL_VERSION, PEER_PROTOCOL_VERSION_MIN};
use prost::Message as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::{Decoder, LengthDelimitedCodec};

/// Bytes of a frame's length prefix.
const LENGTH_BYTES: usize = 4;
/// Bytes read from the socket at a time (at least).
const READ_CHUNK: usize = 64 * 1024;
/// A write buffer grown above this is given back after its flush.
const BUFFER_KEPT_MAX: usize = 4 << 20;

/// Who a replica is on the peer protocol: its cluster, its id and the members it talks to.
#[derive(Clone, Debug)]
pub struct PeerLink {
    pub cluster_id: Arc<str>,
    pub me: NodeId,
    /// Every member, this replica included.
    pub members: MemberSet,
}

/// The ids a replica talks to: the members of the memberships its log schedules from the slot
/// it applies next on (and, while its first membership is a guess, the contacts of its config
/// file), updated by the driver as changes are applied; with what a refusal tells a dialer
/// that is not among them, and the last such thing a refusal told this replica. Cheap to
/// clone: one set, shared.
#[derive(Clone, Debug, Default)]
pub struct MemberSet(Arc<MemberSetInner>);

#[derive(Debug, Default)]
struct MemberSetInner {
    ids: RwLock<BTreeSet<NodeId>>,
    /// What this replica's refusals carry (`None`: it does not know its membership yet).
    view: RwLock<Option<MembershipNotice>>,
    /// The last refusal that told this replica it is not a member, and who refused.
    notice: Mutex<Option<(NodeId, MembershipNotice)>>,
    noticed: AtomicBool,
    /// What each peer this replica has an open outbound connection to said about itself in
    /// its answer hello (removed when the connection ends).
    versions: Mutex<BTreeMap<NodeId, PeerVersion>>,
    /// The cluster version this replica's log is at (0: not known yet): a peer whose release
    /// does not support it is refused, both ways (rule `peer_cluster_version`).
    cluster_version: AtomicU32,
}

/// What a peer said about itself in its hello (`PeerHello` fields 5-7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerVersion {
    /// Its release (`"0.2.0"`; `""`: a replica of 0.1, whose hello says none).
    pub release: String,
    /// The highest cluster version it supports (1 for a replica of 0.1).
    pub cluster_version_max: u32,
    /// The peer protocol version the connection uses.
    pub protocol: u32,
}

impl PeerVersion {
    /// What `hello` says, on a connection of protocol version `protocol`.
    pub fn of(hello: &proto::PeerHello, protocol: u32) -> PeerVersion {
        PeerVersion {
            release: hello.release.clone(),
            cluster_version_max: hello
                .cluster_version_max
                .max(picket_core::locks::CLUSTER_VERSION_FIRST),
            protocol,
        }
    }

    /// The release in words (`"0.1"` for a hello that names none).
    pub fn release_text(&self) -> &str {
        if self.release.is_empty() {
            "0.1"
        } else {
            &self.release
        }
    }
}

/// What a listener that refuses a non-member tells it (`PeerRefusal` fields 3-5): its newest
/// membership, the first slot that governs, and its leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipNotice {
    pub membership: Membership,
    pub from_slot: Slot,
    pub leader: Option<NodeId>,
}

impl MemberSet {
    pub fn new(ids: impl IntoIterator<Item = NodeId>) -> MemberSet {
        let set = MemberSet::default();
        set.replace(ids.into_iter().collect());
        set
    }

    pub fn contains(&self, id: &NodeId) -> bool {
        self.0.ids.read().expect("member set poisoned").contains(id)
    }

    /// The ids, ascending.
    pub fn ids(&self) -> Vec<NodeId> {
        self.0
            .ids
            .read()
            .expect("member set poisoned")
            .iter()
            .copied()
            .collect()
    }

    pub fn replace(&self, ids: BTreeSet<NodeId>) {
        *self.0.ids.write().expect("member set poisoned") = ids;
    }

    /// Sets what this replica's refusals of non-members tell them.
    pub fn set_view(&self, view: Option<MembershipNotice>) {
        *self.0.view.write().expect("member set poisoned") = view;
    }

    pub fn view(&self) -> Option<MembershipNotice> {
        self.0.view.read().expect("member set poisoned").clone()
    }

    /// A peer refused us as a non-member and said what it knows (the outbound side).
    pub fn notice(&self, from: NodeId, notice: MembershipNotice) {
        *self.0.notice.lock().expect("member set poisoned") = Some((from, notice));
        self.0.noticed.store(true, Ordering::Release);
    }

    /// The cluster version this replica's log is at (the driver, every turn).
    pub fn set_cluster_version(&self, version: u32) {
        self.0.cluster_version.store(version, Ordering::Relaxed);
    }

    pub fn cluster_version(&self) -> u32 {
        self.0.cluster_version.load(Ordering::Relaxed)
    }

    /// A connection to `id` opened and `id` said this about itself.
    pub fn set_version(&self, id: NodeId, version: PeerVersion) {
        self.0
            .versions
            .lock()
            .expect("member set poisoned")
            .insert(id, version);
    }

    /// The connection to `id` ended: what it said no longer counts (it may come back as
    /// another release).
    pub fn clear_version(&self, id: NodeId) {
        self.0
            .versions
            .lock()
            .expect("member set poisoned")
            .remove(&id);
    }

    /// What every peer with an open outbound connection said about itself, by id.
    pub fn versions(&self) -> BTreeMap<NodeId, PeerVersion> {
        self.0.versions.lock().expect("member set poisoned").clone()
    }

    /// The last notice not taken yet (the driver, once per turn: one atomic load when none).
    pub fn take_notice(&self) -> Option<(NodeId, MembershipNotice)> {
        if !self.0.noticed.swap(false, Ordering::AcqRel) {
            return None;
        }
        self.0.notice.lock().expect("member set poisoned").take()
    }
}

/// A handshake refused, by either end: `rule` is stable (`peer.proto`, `PeerHello`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub rule: String,
    pub message: String,
    /// With `peer_not_a_member`: what the listener knows of the membership (boxed: a refusal
    /// is an error value, kept small).
    pub told: Option<Box<MembershipNotice>>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (rule {})", self.message, self.rule)
    }
}

impl Refusal {
    pub fn new(rule: &str, message: String) -> Refusal {
        Refusal {
            rule: rule.to_owned(),
            message,
            told: None,
        }
    }

    pub fn to_frame(&self) -> PeerFrame {
        let told = self.told.as_deref();
        frame(Kind::Refusal(proto::PeerRefusal {
            rule: self.rule.clone(),
            message: self.message.clone(),
            membership: told.map(|t| membership_to_wire(&t.membership)),
            membership_from_slot: told.map_or(0, |t| t.from_slot.0),
            leader_node_id: told.and_then(|t| t.leader).map_or(0, |l| l.0),
        }))
    }

    /// A refusal as the wire carried it; a membership that does not decode teaches nothing.
    pub fn from_wire(r: proto::PeerRefusal) -> Refusal {
        let told = r
            .membership
            .and_then(|m| membership_from_wire(m).ok())
            .filter(|_| r.membership_from_slot > 0)
            .map(|membership| {
                Box::new(MembershipNotice {
                    membership,
                    from_slot: Slot(r.membership_from_slot),
                    leader: (r.leader_node_id != 0).then_some(NodeId(r.leader_node_id)),
                })
            });
        Refusal {
            rule: r.rule,
            message: r.message,
            told,
        }
    }
}

pub fn frame(kind: Kind) -> PeerFrame {
    PeerFrame { kind: Some(kind) }
}

/// The hello `link` sends to `to` (the dialer's first frame, or the listener's answer).
pub fn hello(link: &PeerLink, to: NodeId) -> PeerFrame {
    frame(Kind::Hello(proto::PeerHello {
        protocol_version: PEER_PROTOCOL_VERSION,
        cluster_id: link.cluster_id.to_string(),
        from_node_id: link.me.0,
        to_node_id: to.0,
        protocol_version_min: PEER_PROTOCOL_VERSION_MIN,
        release: crate::version::VERSION.to_owned(),
        cluster_version_max: picket_core::locks::CLUSTER_VERSION,
    }))
}

/// The listener's check of a dialer's hello: the dialer it names, or why it is refused.
pub fn check_hello(hello: &proto::PeerHello, link: &PeerLink) -> Result<NodeId, Refusal> {
    check_common(hello, link)?;
    let from = NodeId(hello.from_node_id);
    if from == link.me || !link.members.contains(&from) {
        let mut refusal = Refusal::new(
            "peer_not_a_member",
            format!(
                "node {} is not another member of this cluster (members {:?}, this replica {})",
                from.0,
                link.members.ids().iter().map(|m| m.0).collect::<Vec<_>>(),
                link.me.0
            ),
        );
        refusal.told = link.members.view().map(Box::new);
        return Err(refusal);
    }
    Ok(from)
}

/// The dialer's check of the listener's answer: it must be `to`, answering `link.me`. What the
/// listener said about itself, with the protocol version the connection uses.
pub fn check_answer(
    hello: &proto::PeerHello,
    link: &PeerLink,
    to: NodeId,
) -> Result<PeerVersion, Refusal> {
    let protocol = check_common(hello, link)?;
    if hello.from_node_id != to.0 {
        return Err(Refusal::new(
            "peer_wrong_recipient",
            format!(
                "the replica at this address is node {}, not node {} (members[].peer_address)",
                hello.from_node_id, to.0
            ),
        ));
    }
    Ok(PeerVersion::of(hello, protocol))
}

/// The range of peer protocol versions a hello says its sender speaks (a hello of release 0.1
/// carries no minimum: it speaks its one version).
pub fn protocol_range(hello: &proto::PeerHello) -> (u32, u32) {
    let max = hello.protocol_version;
    let min = match hello.protocol_version_min {
        0 => max,
        min => min.min(max),
    };
    (min, max)
}

/// The version two ends whose ranges are `ours` and `theirs` talk: the highest both speak, or
/// `None` when they have none in common.
pub fn negotiate(ours: (u32, u32), theirs: (u32, u32)) -> Option<u32> {
    let high = ours.1.min(theirs.1);
    let low = ours.0.max(theirs.0);
    (high >= low && high > 0).then_some(high)
}

/// The checks both ends make; the protocol version the connection uses.
fn check_common(hello: &proto::PeerHello, link: &PeerLink) -> Result<u32, Refusal> {
    let ours = (PEER_PROTOCOL_VERSION_MIN, PEER_PROTOCOL_VERSION);
    let theirs = protocol_range(hello);
    let Some(protocol) = negotiate(ours, theirs) else {
        return Err(Refusal::new(
            "peer_protocol_version",
            format!(
                "the peer speaks peer protocol versions {} to {}, this replica {} to {}: none \
                 in common (docs/upgrades.md: releases N and N-1 run together)",
                theirs.0, theirs.1, ours.0, ours.1
            ),
        ));
    };
    if *hello.cluster_id != *link.cluster_id {
        return Err(Refusal::new(
            "peer_cluster_id",
            format!(
                "cluster `{}` is not this cluster (`{}`)",
                hello.cluster_id, link.cluster_id
            ),
        ));
    }
    if hello.to_node_id != link.me.0 {
        return Err(Refusal::new(
            "peer_wrong_recipient",
            format!(
                "the hello is meant for node {}, this is node {} (members[].peer_address)",
                hello.to_node_id, link.me.0
            ),
        ));
    }
    // After the cluster version stepped up, a replica of a release that does not support it
    // would apply the log differently: it is kept out, both ways (docs/upgrades.md).
    let ours = link.members.cluster_version();
    let version = PeerVersion::of(hello, protocol);
    if ours > version.cluster_version_max {
        return Err(Refusal::new(
            "peer_cluster_version",
            format!(
                "this cluster's log is at cluster version {ours}; node {} runs release {}, which \
                 supports cluster versions up to {}: install a release that supports {ours} on \
                 it (docs/upgrades.md)",
                hello.from_node_id,
                version.release_text(),
                version.cluster_version_max
            ),
        ));
    }
    Ok(protocol)
}

/// Reads whole frames from a byte stream.
pub struct FrameReader<R> {
    io: R,
    buf: BytesMut,
    codec: LengthDelimitedCodec,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(io: R) -> FrameReader<R> {
        FrameReader {
            io,
            buf: BytesMut::with_capacity(READ_CHUNK),
            codec: LengthDelimitedCodec::builder()
                .big_endian()
                .length_field_length(LENGTH_BYTES)
                .max_frame_length(PEER_MESSAGE_BYTES_MAX)
                .new_codec(),
        }
    }

    /// The next frame's bytes; `None` at the end of the stream between frames. An end inside a
    /// frame, or a length above [`PEER_MESSAGE_BYTES_MAX`], is an error. Cancel-safe: a call
    /// dropped before it finished loses nothing (the bytes read so far stay buffered).
    pub async fn next_frame(&mut self) -> std::io::Result<Option<BytesMut>> {
        loop {
            if let Some(frame) = self.codec.decode(&mut self.buf)? {
                return Ok(Some(frame));
            }
            self.buf.reserve(READ_CHUNK);
            if self.io.read_buf(&mut self.buf).await? == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the connection ended inside a frame",
                ));
            }
        }
    }
}

/// Decodes one frame's bytes.
pub fn decode(bytes: &[u8]) -> Result<Kind, String> {
    match PeerFrame::decode(bytes) {
        Ok(PeerFrame { kind: Some(kind) }) => Ok(kind),
        Ok(PeerFrame { kind: None }) => Err("peer_frame.kind: required".to_owned()),
        Err(error) => Err(format!("peer_frame: {error}")),
    }
}

/// A frame longer than [`PEER_MESSAGE_BYTES_MAX`]: not written.
#[derive(Debug)]
pub struct TooLarge(pub usize);

/// Buffers frames and writes them out together.
pub struct FrameWriter<W> {
    io: W,
    buf: BytesMut,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    pub fn new(io: W) -> FrameWriter<W> {
        FrameWriter {
            io,
            buf: BytesMut::with_capacity(READ_CHUNK),
        }
    }

    /// Appends `frame` to what the next [`FrameWriter::flush`] writes (the same bytes
    /// `LengthDelimitedCodec` reads back).
    pub fn push(&mut self, frame: &PeerFrame) -> Result<(), TooLarge> {
        let len = frame.encoded_len();
        if len > PEER_MESSAGE_BYTES_MAX {
            return Err(TooLarge(len));
        }
        self.buf.reserve(LENGTH_BYTES + len);
        self.buf.put_u32(len as u32);
        frame
            .encode(&mut self.buf)
            .expect("the buffer was reserved for the frame");
        Ok(())
    }

    /// Bytes pushed and not yet written.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Writes every pushed frame and flushes the stream (under madsim nothing leaves before the
    /// flush).
    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.io.write_all(&self.buf).await?;
        if self.buf.capacity() > BUFFER_KEPT_MAX {
            // A catch-up reply made it large: do not hold that much for every later ping.
            self.buf = BytesMut::with_capacity(READ_CHUNK);
        } else {
            self.buf.clear();
        }
        self.io.flush().await
    }
}
