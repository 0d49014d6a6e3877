//! The checkers: pure functions over a recorded [`History`], each returning the rules it found
//! broken. Run on every seed by the harness; unit-tested here with good and bad histories.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::{
    Accepted, Access, AckedOp, Ask, Checker, FinalKind, History, LogEvent, LogKind, Mode, Outcome,
    RestoreSeen, Violation, WaitCause,
};

fn violation(checker: Checker, detail: String) -> Violation {
    Violation { checker, detail }
}

/// Runs every checker.
pub fn check_all(history: &History) -> Vec<Violation> {
    let mut found = tokens_rise(history);
    found.extend(fencing(history));
    found.extend(applied_prefix(history));
    found.extend(no_acked_loss(history));
    found.extend(session_kept(history));
    found.extend(liveness(history));
    found.extend(waits_end(history));
    found.extend(grants_past_deadline(history));
    found.extend(no_rewind(history));
    found.extend(reads_linearizable(history));
    found
}

/// Checker 9: Linearizable reads. A read without `allow_stale` (`Inspect`; with
/// `[timing] read_mode = "lease"` the leader answers it on its read lease, with `read_index`
/// after a heartbeat round) reflects every write acknowledged before it was asked: the revision
/// it answered from is at least the token of every grant a client was told of before the read
/// started (a grant's token is the revision that granted it). A leader that answered on a lease
/// it no longer held, or from a state behind its commit point, answers from an older revision.
/// Both times are the simulation's true time, recorded on the safe side: a grant's after its
/// answer arrived, a read's before it was sent.
pub fn reads_linearizable(history: &History) -> Vec<Violation> {
    let mut acked: Vec<(u64, u64)> = history
        .grants_acked
        .iter()
        .map(|g| (g.at_ms, g.token))
        .collect();
    acked.sort_unstable();
    // The highest token acknowledged up to each acknowledgement, and that token's time.
    let mut highest: Vec<(u64, u64)> = Vec::with_capacity(acked.len());
    for &(at_ms, token) in &acked {
        let best = match highest.last() {
            Some(&(best, best_at)) if best >= token => (best, best_at),
            _ => (token, at_ms),
        };
        highest.push(best);
    }
    let mut found = Vec::new();
    for read in &history.reads {
        let before = acked.partition_point(|&(at_ms, _)| at_ms < read.started_ms);
        let Some(&(token, at_ms)) = before.checked_sub(1).and_then(|i| highest.get(i)) else {
            continue;
        };
        if read.revision < token {
            found.push(violation(
                Checker::ReadsLinearizable,
                format!(
                    "client {} read `{}` asked at {} ms answered from revision {}, but token {} \
                     was acknowledged at {} ms, before the read was asked",
                    read.client, read.key, read.started_ms, read.revision, token, at_ms
                ),
            ));
        }
    }
    found
}

/// Checker 1: Tokens rise strictly per key, across leaders and restarts: every replica (every boot of
/// it) sees a key's grants with strictly rising tokens, and all replicas agree on the grant at
/// each revision. The one exception is a run of shared waiters granted together: its grants
/// share their revision, so they share their token (docs/locks.md, "Shared locks").
pub fn tokens_rise(history: &History) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut last_per_boot: BTreeMap<(u64, u64, &str), (u64, u64)> = BTreeMap::new();
    let mut at_revision: BTreeMap<(&str, u64), (u64, u64)> = BTreeMap::new();
    for grant in &history.grants {
        let at = (grant.node, grant.boot, grant.key.as_str());
        if let Some((last, last_revision)) = last_per_boot.insert(at, (grant.token, grant.revision))
        {
            let same_run = grant.token == last && grant.revision == last_revision;
            if grant.token <= last && !same_run {
                found.push(violation(
                    Checker::TokensRise,
                    format!(
                        "node {} (boot {}) granted `{}` token {} after token {}",
                        grant.node, grant.boot, grant.key, grant.token, last
                    ),
                ));
            }
        }
        let seen = (grant.token, grant.node);
        match at_revision.get(&(grant.key.as_str(), grant.revision)) {
            Some(&(token, node)) if token != grant.token => found.push(violation(
                Checker::TokensRise,
                format!(
                    "`{}` at revision {}: node {} granted token {}, node {} token {}",
                    grant.key, grant.revision, node, token, grant.node, grant.token
                ),
            )),
            Some(_) => {}
            None => {
                at_revision.insert((grant.key.as_str(), grant.revision), seen);
            }
        }
    }
    // Across replicas and boots: ordered by revision, a key's tokens rise strictly.
    let mut last_per_key: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (&(key, revision), &(token, _)) in &at_revision {
        if let Some((rev_before, token_before)) = last_per_key.insert(key, (revision, token)) {
            if token <= token_before {
                found.push(violation(
                    Checker::TokensRise,
                    format!(
                        "`{key}`: token {token} at revision {revision} is not above token {token_before} at revision {rev_before}"
                    ),
                ));
            }
        }
    }
    found
}

/// The unit a fencing token fences: a lock's key, or a semaphore's key and the permit's slot
/// (`FencingGate::check_slot` fences each slot apart; docs/locks.md, "Semaphores").
fn fence_unit(access: &Accepted) -> (&str, Option<u32>) {
    (access.key.as_str(), access.slot)
}

/// How a fence unit is named in a violation.
fn unit_name((key, slot): (&str, Option<u32>)) -> String {
    match slot {
        None => format!("`{key}`"),
        Some(slot) => format!("`{key}` slot {slot}"),
    }
}

/// Checker 2: fenced exclusion, per exclusive key and per semaphore slot, in the order the
/// fenced resource accepted accesses (writers write with `FencingGate::check`, permit holders
/// with `check_slot` in their slot, shared holders read with `check_read`):
/// - no access carries a token below a **write** token accepted before it in the same unit (a
///   key, or a semaphore's key and slot): an exclusive holder's accepted write ends every
///   earlier holder, so two exclusive holders overlapping, or a reader whose token is below a
///   writer's accepted before it, is a violation; reads raise nothing, so two shared holders'
///   reads interleave freely; a permit holder's write ends every earlier holder *of its slot*,
///   so the N holders of a semaphore write together, each in its own slot;
/// - every accepted token was granted for that key (a replica's watch log or a client's
///   acknowledgement); a write's token in the mode it writes in: a lock write's never only in
///   shared mode (a reader writing), a slot write's in that slot (a holder writing in another
///   holder's slot);
/// - a grant acknowledged as exclusive shares its revision with no other session's grant of the
///   key (only a run of shared waiters, or of permits, is granted together), and a permit's
///   grant shares its revision with no other session's grant of that slot; every permit's slot
///   is below its semaphore's N (the run never lowers N).
///
/// Not a violation, because the gate does not promise it (docs/locks.md, "Shared locks": reads
/// record nothing): a superseded writer's write accepted after a later reader's read, whose token
/// is above the writer's. [`stale_writes_over_reads`] counts them (`over_reads=` in the SIM line).
pub fn fencing(history: &History) -> Vec<Violation> {
    let mut modes: BTreeMap<(&str, u64), BTreeSet<Mode>> = BTreeMap::new();
    let mut acked_sessions: BTreeMap<(&str, u64), BTreeSet<(u64, Mode)>> = BTreeMap::new();
    for op in &history.acked {
        if let AckedOp::Grant {
            key,
            token,
            session,
            mode,
        } = op
        {
            modes
                .entry((key.as_str(), *token))
                .or_default()
                .insert(*mode);
            acked_sessions
                .entry((key.as_str(), *token))
                .or_default()
                .insert((*session, *mode));
        }
    }
    let mut granted_to: BTreeMap<(&str, u64), BTreeSet<u64>> = BTreeMap::new();
    // (key, token) -> the permit slots seen granted, with their sessions.
    let mut slots: BTreeMap<(&str, u64), BTreeSet<(u32, u64)>> = BTreeMap::new();
    for g in &history.grants {
        granted_to
            .entry((g.key.as_str(), g.token))
            .or_default()
            .insert(g.session);
        if let Some(slot) = g.slot {
            slots
                .entry((g.key.as_str(), g.token))
                .or_default()
                .insert((slot, g.session));
        }
    }
    for (&(key, token), acked) in &acked_sessions {
        for &(session, mode) in acked {
            if let Mode::Permit { slot } = mode {
                slots
                    .entry((key, token))
                    .or_default()
                    .insert((slot, session));
            }
        }
    }
    let granted = |key: &str, token: u64| {
        granted_to.contains_key(&(key, token)) || modes.contains_key(&(key, token))
    };
    let mut found = Vec::new();
    let mut highest_write: BTreeMap<(&str, Option<u32>), u64> = BTreeMap::new();
    for access in &history.accepted {
        let unit = fence_unit(access);
        let what = match access.access {
            Access::Write => "write",
            Access::Read => "read",
        };
        if let Some(&high) = highest_write.get(&unit) {
            if access.token < high {
                found.push(violation(
                    Checker::Fencing,
                    format!(
                        "resource accepted a {what} of {} with token {} from client {} at {} ms after a write with token {high}",
                        unit_name(unit),
                        access.token,
                        access.client,
                        access.at_ms
                    ),
                ));
            }
        }
        if access.access == Access::Write {
            let high = highest_write.entry(unit).or_insert(access.token);
            *high = (*high).max(access.token);
        }
        if !granted(&access.key, access.token) {
            found.push(violation(
                Checker::Fencing,
                format!(
                    "resource accepted a {what} of `{}` with token {} from client {} that no replica granted",
                    access.key, access.token, access.client
                ),
            ));
        }
        if access.access == Access::Read {
            continue;
        }
        let at = (access.key.as_str(), access.token);
        let wrong_mode = match access.slot {
            None => modes
                .get(&at)
                .is_some_and(|m| !m.contains(&Mode::Exclusive))
                .then(|| "granted only shared".to_string()),
            Some(slot) => slots
                .get(&at)
                .is_some_and(|s| !s.iter().any(|(granted, _)| *granted == slot))
                .then(|| format!("granted in slot(s) {:?}", slots[&at])),
        };
        if let Some(granted_as) = wrong_mode {
            found.push(violation(
                Checker::Fencing,
                format!(
                    "resource accepted a write of {} with token {} from client {}, {granted_as}",
                    unit_name(unit),
                    access.token,
                    access.client
                ),
            ));
        }
    }
    for (&(key, token), acked) in &acked_sessions {
        let Some(&(exclusive, _)) = acked.iter().find(|(_, m)| *m == Mode::Exclusive) else {
            continue;
        };
        let others: BTreeSet<u64> = granted_to
            .get(&(key, token))
            .into_iter()
            .flatten()
            .chain(acked.iter().map(|(s, _)| s))
            .copied()
            .filter(|s| *s != exclusive)
            .collect();
        if !others.is_empty() {
            found.push(violation(
                Checker::Fencing,
                format!(
                    "`{key}` token {token} was granted exclusive to session {exclusive} and also to sessions {others:?}"
                ),
            ));
        }
    }
    for (&(key, token), granted) in &slots {
        let mut holder: BTreeMap<u32, u64> = BTreeMap::new();
        for &(slot, session) in granted {
            match holder.insert(slot, session) {
                Some(other) if other != session => found.push(violation(
                    Checker::Fencing,
                    format!(
                        "`{key}` slot {slot} was granted to sessions {other} and {session} at token {token}"
                    ),
                )),
                _ => {}
            }
            match history.semaphores.get(key) {
                Some(&permits) if slot >= permits => found.push(violation(
                    Checker::Fencing,
                    format!(
                        "`{key}` token {token}: session {session} was granted slot {slot} of a semaphore of {permits} permits"
                    ),
                )),
                _ => {}
            }
        }
    }
    found
}

/// How many writes the resource accepted from a superseded writer after a later reader's read of
/// the key (the read's token above the write's, no write at or above the read's token between):
/// what the gate does not refuse (reads record nothing). Not a violation; see [`fencing`].
pub fn stale_writes_over_reads(history: &History) -> usize {
    let mut highest_read: BTreeMap<(&str, Option<u32>), u64> = BTreeMap::new();
    let mut count = 0;
    for access in &history.accepted {
        let unit = fence_unit(access);
        let read = highest_read.get(&unit).copied().unwrap_or(0);
        match access.access {
            Access::Read => {
                highest_read.insert(unit, read.max(access.token));
            }
            Access::Write if access.token < read => count += 1,
            Access::Write => {}
        }
    }
    count
}

/// Checker 3: Replicas' applied prefixes are identical: every digest reported for a revision (by any
/// replica, any boot) is the same.
pub fn applied_prefix(history: &History) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut first: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
    for d in &history.digests {
        match first.get(&d.revision) {
            Some(&(digest, node, boot)) if digest != d.digest => found.push(violation(
                Checker::AppliedPrefix,
                format!(
                    "revision {}: node {} (boot {}) has digest {:016x}, node {} (boot {}) {:016x}",
                    d.revision, node, boot, digest, d.node, d.boot, d.digest
                ),
            )),
            Some(_) => {}
            None => {
                first.insert(d.revision, (d.digest, d.node, d.boot));
            }
        }
    }
    found
}

/// Checker 4: No acknowledged grant, release or force-release is lost after every node restarted: each
/// caught-up replica holds the event (where its retained events cover it), and has applied at
/// least as far as every acknowledged grant's revision (its token).
///
/// After a restore from a backup only what the restored cluster acknowledged is judged: a
/// restore loses every change after the backup, drops the watch history and ends every hold
/// (docs/storage.md, "Restoring a backup"), so the old cluster's grants, releases and
/// force-releases are not in the final replicas' state by design.
pub fn no_acked_loss(history: &History) -> Vec<Violation> {
    let mut found = Vec::new();
    if history.final_replicas.is_empty() && !history.acked.is_empty() {
        found.push(violation(
            Checker::NoAckedLoss,
            "no replica caught up after the final restart of every node".to_string(),
        ));
    }
    // At the acceptor: a replica whose synced (acknowledged) log record was damaged while it was
    // down must restart with its durable state lost, never as an ordinary acceptor that forgot
    // the acceptance (the cluster survives that only while the others hold the slot).
    for damage in &history.synced_damage {
        let seen = history
            .recoveries
            .iter()
            .find(|r| r.node == damage.node && r.boot == damage.boot);
        if let Some(r) = seen.filter(|r| r.outcome != "durable_state_lost") {
            found.push(violation(
                Checker::NoAckedLoss,
                format!(
                    "node {} (boot {}) restarted as an ordinary acceptor ({}) after a synced log \
                     record was damaged: it forgot an acknowledged acceptance",
                    r.node, r.boot, r.outcome
                ),
            ));
        }
    }
    let restored = history.restores.last();
    for replica in &history.final_replicas {
        let events: BTreeSet<(&str, FinalKind, u64)> = replica
            .events
            .iter()
            .map(|(_, key, kind, token)| (key.as_str(), *kind, *token))
            .collect();
        for (index, op) in history.acked.iter().enumerate() {
            if restored.is_some_and(|r| !acked_after(history, r, index, op)) {
                continue;
            }
            let (key, kind, token) = match op {
                AckedOp::Grant { key, token, .. } => (key, FinalKind::Granted, *token),
                AckedOp::Release { key, token } => (key, FinalKind::Released, *token),
                AckedOp::ForceRelease { key, token } => (key, FinalKind::ForceReleased, *token),
            };
            if kind == FinalKind::Granted && replica.revision < token {
                found.push(violation(
                    Checker::NoAckedLoss,
                    format!(
                        "node {} restarted at revision {} below acknowledged grant `{key}` token {token}",
                        replica.node, replica.revision
                    ),
                ));
                continue;
            }
            // A release or force-release happened after its grant (revision = token).
            if token >= replica.events_from && !events.contains(&(key.as_str(), kind, token)) {
                found.push(violation(
                    Checker::NoAckedLoss,
                    format!(
                        "node {} lost acknowledged {kind:?} of `{key}` token {token} (events from revision {})",
                        replica.node, replica.events_from
                    ),
                ));
            }
        }
    }
    found
}

/// Checker 5: A session kept alive within its TTL is never expired: no session disappears (other than
/// by its client closing it) before `sent + ttl / (1 + drift bound)` of an acknowledged keepalive
/// (the server's deadline runs from when it *received* the keepalive, after it was sent, on a
/// clock no faster than the bound). This includes a keepalive a deposed leader acknowledged
/// before it noticed: the new leader's takeover grace must cover it (it found exactly that bug;
/// docs/simulation.md, "Found by the checkers").
pub fn session_kept(history: &History) -> Vec<Violation> {
    let closed: BTreeSet<u64> = history.sessions_closed.iter().copied().collect();
    let mut gone_first: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for gone in &history.sessions_gone {
        let entry = gone_first
            .entry(gone.session)
            .or_insert((gone.at_ms, gone.node));
        if gone.at_ms < entry.0 {
            *entry = (gone.at_ms, gone.node);
        }
    }
    let mut found = Vec::new();
    for ka in &history.keepalives {
        if closed.contains(&ka.session) {
            continue;
        }
        let Some(&(gone_at, node)) = gone_first.get(&ka.session) else {
            continue;
        };
        let protected = ka.ttl_ms * 1_000_000 / (1_000_000 + history.drift_bound_ppm);
        // 1 ms: the clocks count whole milliseconds.
        if gone_at + 1 < ka.sent_at_ms + protected && gone_at >= ka.sent_at_ms {
            found.push(violation(
                Checker::SessionKept,
                format!(
                    "session {} expired on node {node} at {gone_at} ms, but a keepalive sent at {} ms was acknowledged (ttl {} ms, protected until {} ms)",
                    ka.session,
                    ka.sent_at_ms,
                    ka.ttl_ms,
                    ka.sent_at_ms + protected
                ),
            ));
        }
    }
    found
}

/// Checker 6: Liveness: after the nemesis healed, the probe acquire was granted within the bound;
/// and every membership change the nemesis asked for completed within its bound.
pub fn liveness(history: &History) -> Vec<Violation> {
    let mut found: Vec<Violation> = history
        .membership_failures
        .iter()
        .map(|failure| violation(Checker::Liveness, failure.clone()))
        .collect();
    let Some(healed) = history.healed_at_ms else {
        return found;
    };
    found.extend(probe_liveness(history, healed));
    found
}

fn probe_liveness(history: &History, healed: u64) -> Vec<Violation> {
    match history.probe_granted_at_ms {
        Some(granted) if granted <= healed + history.liveness_bound_ms => Vec::new(),
        Some(granted) => vec![violation(
            Checker::Liveness,
            format!(
                "probe granted {} ms after the heal (bound {} ms)",
                granted.saturating_sub(healed),
                history.liveness_bound_ms
            ),
        )],
        None => vec![violation(
            Checker::Liveness,
            format!(
                "probe not granted within {} ms of the heal at {healed} ms",
                history.liveness_bound_ms
            ),
        )],
    }
}

/// Where a session stands with a key in one replica boot's lock log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WaitState {
    /// Queued at this log time.
    Waiting { queued_ms: u64 },
    /// Not waiting: its wait was removed (`why`), it was granted, or its hold ended.
    NotWaiting { why: &'static str, revision: u64 },
}

/// A grant by hand-off (see [`waits_end`]) in one replica boot's lock log, with where its
/// session stood with the key just before (`None`: not known, its earlier events fell before
/// the stream began).
struct HandOff<'h> {
    event: &'h LogEvent,
    token: u64,
    before: Option<WaitState>,
}

/// Every hand-off grant of every replica boot's lock log, in log order per boot.
fn hand_offs(history: &History) -> Vec<HandOff<'_>> {
    let mut streams: BTreeMap<(u64, u64), Vec<&LogEvent>> = BTreeMap::new();
    for e in &history.log {
        streams.entry((e.node, e.boot)).or_default().push(e);
    }
    let mut found = Vec::new();
    for events in streams.values() {
        let mut state: BTreeMap<(u64, &str), WaitState> = BTreeMap::new();
        let mut last_revision = 0;
        let mut i = 0;
        while i < events.len() {
            let revision = events[i].revision;
            let end = events[i..]
                .iter()
                .position(|e| e.revision != revision)
                .map_or(events.len(), |n| i + n);
            // A revision seen again (the watcher started over within a boot) is skipped.
            if revision > last_revision {
                last_revision = revision;
                // Keys something happened to earlier in this revision.
                let mut touched: BTreeSet<&str> = BTreeSet::new();
                for e in &events[i..end] {
                    let key = e.key.as_str();
                    let pair = (e.session, key);
                    let why = match e.kind {
                        LogKind::Queued => None,
                        LogKind::Granted { token } => {
                            if touched.contains(key) {
                                found.push(HandOff {
                                    event: e,
                                    token,
                                    before: state.get(&pair).copied(),
                                });
                            }
                            Some("granted")
                        }
                        LogKind::WaitRemoved {
                            cause: WaitCause::Cancelled,
                        } => Some("cancelled"),
                        LogKind::WaitRemoved {
                            cause: WaitCause::Expired,
                        } => Some("expired"),
                        LogKind::WaitRemoved {
                            cause: WaitCause::SessionEnded,
                        } => Some("ended with its session"),
                        LogKind::HoldEnded { .. } => Some("a hold that ended"),
                    };
                    let next = match why {
                        None => WaitState::Waiting {
                            queued_ms: e.time_ms,
                        },
                        Some(why) => WaitState::NotWaiting {
                            why,
                            revision: e.revision,
                        },
                    };
                    state.insert(pair, next);
                    touched.insert(key);
                }
            }
            i = end;
        }
    }
    found
}

/// Checker 7: no grant to a cancelled or expired wait. The evidence and what it shows:
///
/// - **The lock log** of every replica boot (the watcher's stream, in log order; a revision seen
///   again in a stream is skipped). A waiter is granted only by a *hand-off*: a revision in which
///   something else happened to the key first (a release, a wait removed, a force-release, a
///   session's end), while a fresh grant (the key free, or a shared request joining) is the only
///   event of its own `Acquire`'s revision on the key. So a hand-off `Granted` to a session must
///   find it waiting: its last event on the key in the stream is `Queued`. After a
///   `WaitRemoved` (cancelled, expired, its session's end; in an earlier revision or earlier in
///   the same one), a grant or a hold's end, it waits only once it is `Queued` again. A session
///   whose events on the key fell before the stream began (compaction) is judged from its next
///   event on.
/// - **The client's view**: a `cancel_wait` answered `removed` at revision R, after which the
///   same wait's call answered `Granted` with a token above R (the client was granted a wait
///   after its cancel was acknowledged); a cancel answered `held: t` where no replica granted t
///   to that session on the key.
/// - **Deadlines** are judged by [`grants_past_deadline`], part of [`check_all`] beside this
///   checker (docs/simulation.md, "Found by the checkers: a wait granted past its deadline").
pub fn waits_end(history: &History) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut reported: BTreeSet<(u64, &str, u64)> = BTreeSet::new();
    for h in hand_offs(history) {
        let e = h.event;
        let Some(WaitState::NotWaiting { why, revision }) = h.before else {
            continue;
        };
        // Every replica sees the same grant: reported once.
        if reported.insert((e.session, e.key.as_str(), h.token)) {
            found.push(violation(
                Checker::WaitsEnd,
                format!(
                    "node {} (boot {}) granted `{}` token {} to session {} at revision {}, whose wait was {why} at revision {revision}",
                    e.node, e.boot, e.key, h.token, e.session, e.revision
                ),
            ));
        }
    }
    let granted: BTreeSet<(u64, &str, u64)> = history
        .grants
        .iter()
        .map(|g| (g.session, g.key.as_str(), g.token))
        .collect();
    for a in &history.attempts {
        let Some(cancel) = a.cancel else {
            continue;
        };
        if let Outcome::Granted { token } = a.outcome {
            if cancel.removed && token > cancel.revision {
                found.push(violation(
                    Checker::WaitsEnd,
                    format!(
                        "client {} (session {}) was granted `{}` token {token} after its cancel was acknowledged as removed at revision {}",
                        a.client, a.session, a.key, cancel.revision
                    ),
                ));
            }
        }
        if let Some(held) = cancel.held_token {
            if !granted.contains(&(a.session, a.key.as_str(), held)) {
                found.push(violation(
                    Checker::WaitsEnd,
                    format!(
                        "client {} (session {}): cancel of `{}` answered held token {held}, which no replica granted to it",
                        a.client, a.session, a.key
                    ),
                ));
            }
        }
    }
    found
}

/// Checker 7's deadline rule: a hand-off grant (see [`waits_end`]) whose log time is past its
/// wait's deadline. A wait's deadline is the log time of its `Queued` revision plus the timeout
/// it asked for (docs/locks.md). The log does not carry the timeout; the clients record it
/// ([`crate::history::Attempt::timeout_ms`]), and the workload gives every wait of a session on
/// a key the same one (drawn when the session opens), so the pair names it; a pair that ever
/// waited without a deadline is not judged.
///
/// The core keeps this rule: from cluster version 2 on, a hand-off first removes the waits at
/// the head of its queue whose deadline passed at its log time (`grant_from_queue`); at cluster
/// version 1 the leader writes an `ExpireWaits` before every hand-off (docs/locks.md, "Waits
/// that end"). The planted bug `late-expiry` breaks it.
pub fn grants_past_deadline(history: &History) -> Vec<Violation> {
    // (session, key) -> the timeout of its waits; None when one had no deadline.
    let mut timeouts: BTreeMap<(u64, &str), Option<u64>> = BTreeMap::new();
    for a in &history.attempts {
        if a.ask == Ask::Try {
            continue;
        }
        let entry = timeouts
            .entry((a.session, a.key.as_str()))
            .or_insert(a.timeout_ms);
        *entry = match (*entry, a.timeout_ms) {
            (Some(was), Some(now)) => Some(was.max(now)),
            _ => None,
        };
    }
    let mut found = Vec::new();
    let mut reported: BTreeSet<(u64, &str, u64)> = BTreeSet::new();
    for h in hand_offs(history) {
        let e = h.event;
        let Some(WaitState::Waiting { queued_ms }) = h.before else {
            continue;
        };
        let Some(Some(timeout)) = timeouts.get(&(e.session, e.key.as_str())) else {
            continue;
        };
        let deadline = queued_ms + timeout;
        if e.time_ms > deadline && reported.insert((e.session, e.key.as_str(), h.token)) {
            found.push(violation(
                Checker::WaitsEnd,
                format!(
                    "node {} (boot {}) granted `{}` token {} to session {} at log time {} ms, past its wait's deadline {deadline} ms (queued at {queued_ms} ms)",
                    e.node, e.boot, e.key, h.token, e.session, e.time_ms
                ),
            ));
        }
    }
    found
}

/// Whether acknowledgement `index` of `History::acked` came from the cluster `restore` made: a
/// grant by its session (opened on the restored cluster), a release or force-release by when
/// its answer was recorded (at once, as it arrived).
fn acked_after(history: &History, restore: &RestoreSeen, index: usize, op: &AckedOp) -> bool {
    match op {
        AckedOp::Grant { session, .. } => match history.sessions_opened.get(session) {
            Some(opened) => restore.after_by_time(*opened),
            None => index >= restore.acked_before,
        },
        AckedOp::Release { .. } | AckedOp::ForceRelease { .. } => index >= restore.acked_before,
    }
}

/// Checker 8: a restore never rewinds a token (docs/storage.md, "Restoring a backup"; DESIGN
/// "Backups never rewind a token"). For every loss of the whole cluster restored from an older
/// backup:
/// - per key, every grant after the restore (a watcher's, from a boot of the restored cluster,
///   or one acknowledged to a session opened on it) has a token strictly above every grant
///   before it (a watcher's from the old cluster, or one acknowledged to its sessions), though
///   the old cluster went on granting after the backup was taken;
/// - the clients carried on: one was granted something on a session the restored cluster
///   opened (their old sessions are gone: docs/storage.md);
/// - the fenced resource (the real `FencingGate`, which remembers the old cluster's tokens)
///   accepts the restored cluster's accesses: it refuses one only when a higher token of the
///   restored cluster was written before it in the same unit (ordinary fencing); a refusal for
///   any other reason means an old token is above the new one, a resource fenced off the new
///   cluster.
pub fn no_rewind(history: &History) -> Vec<Violation> {
    let mut found = Vec::new();
    for restore in &history.restores {
        let mut before: BTreeMap<&str, u64> = BTreeMap::new();
        let mut after: BTreeMap<&str, u64> = BTreeMap::new();
        let mut after_tokens: BTreeSet<(&str, u64)> = BTreeSet::new();
        for grant in &history.grants {
            let key = grant.key.as_str();
            if restore.after_by_boot(grant.node, grant.boot) {
                let low = after.entry(key).or_insert(grant.token);
                *low = (*low).min(grant.token);
                after_tokens.insert((key, grant.token));
            } else {
                let high = before.entry(key).or_insert(grant.token);
                *high = (*high).max(grant.token);
            }
        }
        for (index, op) in history.acked.iter().enumerate() {
            let AckedOp::Grant { key, token, .. } = op else {
                continue;
            };
            if acked_after(history, restore, index, op) {
                let low = after.entry(key.as_str()).or_insert(*token);
                *low = (*low).min(*token);
                after_tokens.insert((key.as_str(), *token));
            } else {
                let high = before.entry(key.as_str()).or_insert(*token);
                *high = (*high).max(*token);
            }
        }
        let carried_on = history.acked.iter().enumerate().any(|(index, op)| {
            matches!(op, AckedOp::Grant { .. }) && acked_after(history, restore, index, op)
        });
        if !carried_on {
            found.push(violation(
                Checker::NoRewind,
                format!(
                    "no client was granted anything on a new session after the restore from the \
                     backup at revision {} (restored revision {})",
                    restore.backup_revision, restore.floor
                ),
            ));
        }
        for (key, low) in &after {
            if let Some(high) = before.get(key).filter(|high| *low <= **high) {
                found.push(violation(
                    Checker::NoRewind,
                    format!(
                        "`{key}`: token {low} granted after the restore (backup revision {}, \
                         restored revision {}) is not above token {high} granted before it",
                        restore.backup_revision, restore.floor
                    ),
                ));
            }
        }
        for refused in &history.refused {
            if refused.accepted_before < restore.accepted_before
                || !after_tokens.contains(&(refused.key.as_str(), refused.token))
            {
                continue;
            }
            let fenced_by_new = history.accepted[restore.accepted_before..refused.accepted_before]
                .iter()
                .any(|a| {
                    a.access == Access::Write
                        && a.key == refused.key
                        && a.slot == refused.slot
                        && a.token > refused.token
                        && after_tokens.contains(&(a.key.as_str(), a.token))
                });
            if !fenced_by_new {
                found.push(violation(
                    Checker::NoRewind,
                    format!(
                        "the resource refused the restored cluster's {:?} of {} token {} from \
                         client {} at {} ms: no newer token of the restored cluster was written \
                         there (an old cluster's token is above it)",
                        refused.access,
                        unit_name((refused.key.as_str(), refused.slot)),
                        refused.token,
                        refused.client,
                        refused.at_ms
                    ),
                ));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests;
