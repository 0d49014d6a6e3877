//! The checkers: pure functions over a recorded [`History`], each returning the rules it found
//! broken. Run on every seed by the harness; unit-tested here with good and bad histories.

use std::collections::{BTreeMap, BTreeSet};

use crate::history::{AckedOp, Checker, FinalKind, History, Violation};

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
    found
}

/// Checker 1: Tokens rise strictly per key, across leaders and restarts: every replica (every boot of
/// it) sees a key's grants with strictly rising tokens, and all replicas agree on the grant at
/// each revision.
pub fn tokens_rise(history: &History) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut last_per_boot: BTreeMap<(u64, u64, &str), u64> = BTreeMap::new();
    let mut at_revision: BTreeMap<(&str, u64), (u64, u64)> = BTreeMap::new();
    for grant in &history.grants {
        let at = (grant.node, grant.boot, grant.key.as_str());
        if let Some(last) = last_per_boot.insert(at, grant.token) {
            if grant.token <= last {
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

/// Checker 2: The fenced resource never accepts a write whose token is lower than one it accepted for
/// the key, and every accepted write's token was really granted for that key.
pub fn fencing(history: &History) -> Vec<Violation> {
    let granted: BTreeSet<(&str, u64)> = history
        .grants
        .iter()
        .map(|g| (g.key.as_str(), g.token))
        .chain(history.acked.iter().filter_map(|op| match op {
            AckedOp::Grant { key, token, .. } => Some((key.as_str(), *token)),
            _ => None,
        }))
        .collect();
    let mut found = Vec::new();
    let mut highest: BTreeMap<&str, u64> = BTreeMap::new();
    for write in &history.writes {
        let key = write.key.as_str();
        if let Some(&high) = highest.get(key) {
            if write.token < high {
                found.push(violation(
                    Checker::Fencing,
                    format!(
                        "resource accepted `{key}` token {} from client {} at {} ms after token {high}",
                        write.token, write.client, write.at_ms
                    ),
                ));
            }
        }
        let high = highest.entry(key).or_insert(write.token);
        *high = (*high).max(write.token);
        if !granted.contains(&(key, write.token)) {
            found.push(violation(
                Checker::Fencing,
                format!(
                    "resource accepted `{key}` token {} from client {} that no replica granted",
                    write.token, write.client
                ),
            ));
        }
    }
    found
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
    for replica in &history.final_replicas {
        let events: BTreeSet<(&str, FinalKind, u64)> = replica
            .events
            .iter()
            .map(|(_, key, kind, token)| (key.as_str(), *kind, *token))
            .collect();
        for op in &history.acked {
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

/// Checker 6: Liveness: after the nemesis healed, the probe acquire was granted within the bound.
pub fn liveness(history: &History) -> Vec<Violation> {
    let Some(healed) = history.healed_at_ms else {
        return Vec::new();
    };
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

#[cfg(test)]
mod tests;
