//! `record_decode`: arbitrary bytes into every decoder of durable state. The first byte picks
//! the decoder, the rest is its input.
//!
//! - `proto`'s durable protobuf records (log entry, hard state, snapshot record, command, reply,
//!   lock snapshot) -> core types: never a panic; an error names a field; a value that decodes
//!   encodes and decodes back to itself (`core -> proto -> core` is the identity).
//! - A lock snapshot that decodes is restored: `LockStateMachine::restore` either refuses it or
//!   gives a machine whose invariants hold, whose own snapshot is the one restored, and which
//!   keeps its invariants while applying commands.
//! - `storage`'s framing (blob files, segment header, record frame, scan ahead): never a panic;
//!   a blob that decodes re-encodes to the same bytes; a record that checks out is inside the
//!   buffer.

use picket_core::locks::{Command, LockSnapshot, LockStateMachine, RequestId, SessionProof, Token};
use picket_core::node::NodeCommand;
use picket_core::paxos::AcceptedEntry;
use picket_core::time::Instant;
use picket_proto::convert::records::{
    decode_hard_state, decode_log_entry, decode_snapshot_record, log_entry_to_wire,
    snapshot_to_wire, SnapshotWithSchedule,
};
use picket_proto::convert::{decode_command, decode_lock_snapshot, decode_reply};
use picket_proto::{proto, DecodeError};
use picket_storage::format::{
    check_frame, check_record, decode_blob, decode_segment_header, encode_blob,
    encode_segment_header, scan_for_valid_record, ScanAhead, HARD_STATE_MAGIC, SEGMENT_VERSION_1,
    SEGMENT_VERSION_2, SNAPSHOT_MAGIC,
};
use prost::Message;

/// Number of decoders the first byte chooses from.
pub const DECODERS: u8 = 10;

/// Runs one input.
pub fn run(data: &[u8]) {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % DECODERS {
        0 => log_entry(bytes),
        1 => hard_state(bytes),
        2 => snapshot_record(bytes),
        3 => command(bytes),
        4 => reply(bytes),
        5 => lock_snapshot(bytes),
        6 => blob(bytes),
        7 => segment_header(bytes),
        8 => record_frame(bytes),
        _ => scan(bytes),
    }
}

/// An error must say what was wrong: a protobuf error, or a field name and a reason.
pub fn check_error(error: &DecodeError) {
    if let DecodeError::Invalid(e) = error {
        assert!(
            !e.field.is_empty(),
            "conversion error without a field: {e:?}"
        );
    }
    assert!(!error.to_string().is_empty(), "empty error message");
}

fn log_entry(bytes: &[u8]) {
    match decode_log_entry::<NodeCommand>(bytes) {
        Ok(entry) => {
            let again = encode_decode_entry(entry.clone());
            assert_eq!(again, entry, "log entry round trip");
        }
        Err(e) => check_error(&e),
    }
}

fn encode_decode_entry(entry: AcceptedEntry<NodeCommand>) -> AcceptedEntry<NodeCommand> {
    let bytes = log_entry_to_wire(entry).encode_to_vec();
    decode_log_entry(&bytes).expect("an encoded log entry decodes")
}

fn hard_state(bytes: &[u8]) {
    match decode_hard_state(bytes) {
        Ok(hs) => {
            let wire = proto::HardState::from(hs.clone()).encode_to_vec();
            let again = decode_hard_state(&wire).expect("an encoded hard state decodes");
            assert_eq!(again, hs, "hard state round trip");
        }
        Err(e) => check_error(&e),
    }
}

fn snapshot_record(bytes: &[u8]) {
    match decode_snapshot_record::<LockSnapshot>(bytes) {
        Ok((slot, snapshot, schedule)) => {
            let wire =
                snapshot_to_wire((slot, snapshot.clone()), schedule.as_ref()).encode_to_vec();
            let again: SnapshotWithSchedule<LockSnapshot> =
                decode_snapshot_record(&wire).expect("an encoded snapshot record decodes");
            assert_eq!(
                again,
                (slot, snapshot.clone(), schedule),
                "snapshot record round trip"
            );
            restore(snapshot);
        }
        Err(e) => check_error(&e),
    }
}

fn command(bytes: &[u8]) {
    match decode_command(bytes) {
        Ok(c) => {
            let wire = proto::Command::from(c.clone()).encode_to_vec();
            let again = decode_command(&wire).expect("an encoded command decodes");
            assert_eq!(again, c, "command round trip");
            // Any command a log can hold applies without a panic, keeping the invariants.
            let mut sm = LockStateMachine::new(Default::default());
            let _ = sm.apply(Instant::from_millis(1), c);
            sm.check_invariants();
        }
        Err(e) => check_error(&e),
    }
}

fn reply(bytes: &[u8]) {
    match decode_reply(bytes) {
        Ok(r) => {
            let wire = proto::Reply::from(r.clone()).encode_to_vec();
            let again = decode_reply(&wire).expect("an encoded reply decodes");
            assert_eq!(again, r, "reply round trip");
        }
        Err(e) => check_error(&e),
    }
}

fn lock_snapshot(bytes: &[u8]) {
    match decode_lock_snapshot(bytes) {
        Ok(s) => {
            let wire = proto::LockSnapshot::from(s.clone()).encode_to_vec();
            let again = decode_lock_snapshot(&wire).expect("an encoded snapshot decodes");
            assert_eq!(again, s, "lock snapshot round trip");
            restore(s);
        }
        Err(e) => check_error(&e),
    }
}

/// A snapshot `restore` accepts must describe a reachable state: invariants hold, its own
/// snapshot is the one given, and commands apply to it without breaking the invariants.
fn restore(snapshot: LockSnapshot) {
    let Ok(mut sm) = LockStateMachine::restore(snapshot.clone()) else {
        return;
    };
    sm.check_invariants();
    // `restore` does not insist on the snapshot's list orders (a finding, harmless: the
    // restored state is the same whatever the order), so compare in canonical order.
    assert_eq!(
        sm.snapshot(),
        canonical(snapshot.clone()),
        "restore then snapshot changed the state"
    );
    let again = LockStateMachine::restore(sm.snapshot()).expect("own snapshot restores");
    assert_eq!(again, sm, "snapshot round trip of a restored machine");
    let sessions: Vec<_> = snapshot.sessions.iter().map(|s| s.id).collect();
    let locks: Vec<_> = snapshot
        .locks
        .iter()
        .map(|l| (l.namespace.clone(), l.key.clone(), l.holders[0]))
        .collect();
    let stamp = Instant::from_millis(snapshot.time.as_millis().saturating_add(1));
    for (namespace, key, hold) in locks.iter().take(4) {
        let request = RequestId(u64::MAX - 1);
        let _ = sm.apply(
            stamp,
            Command::Release {
                session: hold.session,
                proof: SessionProof::legacy(),
                request,
                namespace: namespace.clone(),
                key: key.clone(),
                token: Token(hold.token.0),
            },
        );
        sm.check_invariants();
    }
    for session in sessions.iter().take(4) {
        let _ = sm.apply(
            stamp,
            Command::CloseSession {
                session: *session,
                proof: SessionProof::legacy(),
            },
        );
        sm.check_invariants();
    }
    let _ = sm.apply(
        stamp,
        Command::ExpireSessions {
            sessions: sessions.clone(),
        },
    );
    sm.check_invariants();
}

/// The snapshot with its lists in the order `LockStateMachine::snapshot` writes them.
fn canonical(mut s: LockSnapshot) -> LockSnapshot {
    s.sessions.sort_by_key(|x| x.id);
    s.locks
        .sort_by(|a, b| (&a.namespace, &a.key).cmp(&(&b.namespace, &b.key)));
    s.classes
        .sort_by(|a, b| (&a.0, &a.1.prefix).cmp(&(&b.0, &b.1.prefix)));
    s.force_releases.sort_by_key(|r| r.id);
    // A snapshot written before the cluster version was kept says none (0): restored at 1.
    s.cluster_version = s
        .cluster_version
        .max(picket_core::locks::CLUSTER_VERSION_FIRST);
    s
}

fn blob(bytes: &[u8]) {
    for magic in [HARD_STATE_MAGIC, SNAPSHOT_MAGIC] {
        if let Ok((header, payload)) = decode_blob(magic, bytes) {
            assert_eq!(header.len, payload.len() as u64);
            assert_eq!(
                encode_blob(magic, header.index, payload),
                bytes,
                "blob re-encodes differently"
            );
        }
    }
}

fn segment_header(bytes: &[u8]) {
    if let Ok(index) = decode_segment_header(bytes) {
        assert_eq!(&encode_segment_header(index)[..], &bytes[..32]);
    }
}

fn record_frame(bytes: &[u8]) {
    let Some((&max, buf)) = bytes.split_first() else {
        return;
    };
    let max = u32::from(max) * 4;
    for off in 0..=buf.len().min(64) {
        if let Ok(end) = check_record(buf, off, max) {
            assert!(
                end <= buf.len() && end >= off + 8,
                "record end {end} off {off}"
            );
            assert!((end - off - 8) as u64 <= u64::from(max));
        }
    }
}

fn scan(bytes: &[u8]) {
    let Some((&max, buf)) = bytes.split_first() else {
        return;
    };
    let max = u32::from(max) * 4;
    // The scan's contract: `from` (a bad record's offset) is inside the buffer or at its end.
    for from in [0, 1, buf.len() / 2, buf.len()]
        .into_iter()
        .filter(|f| *f <= buf.len())
    {
        if let ScanAhead::Valid(at) = scan_for_valid_record(buf, from, max, SEGMENT_VERSION_1) {
            assert!(at >= from, "found {at} before {from}");
            assert!(
                check_record(buf, at, max).is_ok(),
                "scan found a bad record"
            );
        }
        // Version 2 also counts commit records as valid frames after the bad one.
        if let ScanAhead::Valid(at) = scan_for_valid_record(buf, from, max, SEGMENT_VERSION_2) {
            assert!(at >= from, "found {at} before {from}");
            assert!(
                check_frame(buf, at, max, SEGMENT_VERSION_2).is_ok(),
                "scan found a bad frame"
            );
        }
    }
}
