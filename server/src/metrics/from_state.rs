//! [`namespace_stats`]: the namespace series computed from the lock state machine, so the driver
//! only has to call `metrics.set_namespace_stats(&namespace_stats(node.state(), now))`
//! periodically (every few seconds, on every replica: each exports its own applied state, and the
//! alert rule takes the maximum over replicas).

use std::collections::BTreeSet;
use std::time::Duration;

use picket_core::locks::{HoldInfo, LockStateMachine};
use picket_core::node::{OVERDUE_HOLDS_MAX, OVERDUE_HOLDS_PER_NAMESPACE_MAX};
use picket_core::time::Instant;

use super::{NamespaceStats, PagedHold, NAMESPACES_MAX};

/// Per namespace, at most this many held keys are inspected to sum their waiters; beyond it the
/// `waiters` count is a lower bound. Keeps one refresh's work bounded (the driver's task runs it).
pub const WAITER_SCAN_KEYS_MAX: usize = 10_000;

/// The statistics of every namespace holding a lock at `now` (log time or the driver's clock:
/// hold ages are `now - grant time`).
///
/// Cost: one `list_holds` per namespace (O(holds)) and one `inspect` per held key up to
/// [`WAITER_SCAN_KEYS_MAX`] per namespace.
pub fn namespace_stats(state: &LockStateMachine, now: Instant) -> Vec<NamespaceStats> {
    let mut stats = Vec::new();
    let mut overdue = state.overdue_holds(now, OVERDUE_HOLDS_PER_NAMESPACE_MAX, OVERDUE_HOLDS_MAX);
    // Grouped by namespace below, each group furthest over its threshold first.
    overdue.sort_by(|a, b| a.namespace.cmp(&b.namespace));
    for oldest in state.longest_holds(now).into_iter().take(NAMESPACES_MAX) {
        let namespace = oldest.namespace.clone();
        let holds = state
            .list_holds(&namespace, now, usize::MAX)
            .unwrap_or_default();
        let mut waiters = 0;
        let mut longest = None;
        // A shared key is listed once per holder: its queue is counted once.
        let mut keys_seen: BTreeSet<&str> = BTreeSet::new();
        for (i, hold) in holds.iter().enumerate() {
            let is_oldest = hold.key == oldest.key;
            if i >= WAITER_SCAN_KEYS_MAX && !is_oldest {
                continue;
            }
            if !keys_seen.insert(hold.key.as_str()) {
                continue;
            }
            let Ok(info) = state.inspect(&namespace, &hold.key, now) else {
                continue;
            };
            waiters += info.queue_depth;
            if is_oldest {
                longest = Some(paged_hold(&oldest, &info));
            }
        }
        // A shared key's holders share its series: the one furthest over stands for it.
        let mut overdue_keys: BTreeSet<&str> = BTreeSet::new();
        let overdue_holds = overdue
            .iter()
            .filter(|hold| hold.namespace == namespace)
            .filter(|hold| overdue_keys.insert(hold.key.as_str()))
            .filter_map(|hold| {
                let info = state.inspect(&namespace, &hold.key, now).ok()?;
                Some(paged_hold(hold, &info))
            })
            .collect();
        stats.push(NamespaceStats {
            namespace,
            holds: holds.len(),
            waiters,
            longest_hold: longest,
            overdue_holds,
        });
    }
    stats
}

fn paged_hold(hold: &HoldInfo, info: &picket_core::locks::KeyInfo) -> PagedHold {
    PagedHold {
        key: hold.key.clone(),
        held_for: Duration::from_millis(hold.held_for_ms),
        class: info.class.name.clone(),
        fenced: info.class.fenced,
        hold_max_expected: Duration::from_millis(info.class.hold_ms_max_expected),
        queue_depth: info.queue_depth,
        owner: info.class.owner.clone(),
        runbook_url: info.class.runbook_url.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picket_core::locks::{
        Actor, ClassSpec, Command, Identity, LockConfig, LockMode, RequestId, Role, SessionId,
        SessionProof, Wait,
    };

    fn session(sm: &mut LockStateMachine, t: u64, name: &str) -> SessionId {
        let identity = Identity {
            name: name.to_owned(),
            ..Identity::default()
        };
        let reply = sm.apply(
            Instant::from_millis(t),
            Command::CreateSession {
                secret_hash: None,
                ttl_ms: None,
                identity,
            },
        );
        assert!(reply.is_ok(), "{reply:?}");
        SessionId(sm.revision().0)
    }

    fn acquire(sm: &mut LockStateMachine, t: u64, s: SessionId, r: u64, ns: &str, key: &str) {
        acquire_in(sm, t, s, r, (ns, key), LockMode::Exclusive);
    }

    fn acquire_in(
        sm: &mut LockStateMachine,
        t: u64,
        s: SessionId,
        r: u64,
        (ns, key): (&str, &str),
        mode: LockMode,
    ) {
        let reply = sm.apply(
            Instant::from_millis(t),
            Command::Acquire {
                session: s,
                proof: SessionProof::legacy(),
                request: RequestId(r),
                namespace: ns.to_owned(),
                key: key.to_owned(),
                mode,
                wait: Some(Wait::UNBOUNDED),
            },
        );
        assert!(reply.is_ok(), "{reply:?}");
    }

    /// The namespace's stats at 61 s: two holds and one waiter, the longest hold (`what`) held
    /// for 60 s with that waiter behind it.
    fn assert_two_holds_and_a_waiter(sm: &LockStateMachine, what: &str) {
        let stats = namespace_stats(sm, Instant::from_millis(61_000));
        assert_eq!(stats.len(), 1);
        assert_eq!((stats[0].holds, stats[0].waiters), (2, 1));
        let longest = stats[0].longest_hold.as_ref().unwrap();
        assert_eq!(longest.held_for, Duration::from_secs(60), "{what}");
        assert_eq!(longest.queue_depth, 1);
    }

    #[test]
    fn every_shared_holder_counts_and_the_queue_once() {
        let mut sm = LockStateMachine::new(LockConfig::default());
        let a = session(&mut sm, 10, "a");
        let b = session(&mut sm, 10, "b");
        let w = session(&mut sm, 10, "w");
        acquire_in(&mut sm, 1_000, a, 1, ("docs", "page"), LockMode::Shared);
        acquire_in(&mut sm, 2_000, b, 1, ("docs", "page"), LockMode::Shared);
        acquire(&mut sm, 3_000, w, 1, "docs", "page"); // queued behind both readers
        assert_two_holds_and_a_waiter(&sm, "the oldest reader");
    }

    #[test]
    fn every_semaphore_permit_counts_for_holds_and_the_longest_hold() {
        let mut sm = LockStateMachine::new(LockConfig::default());
        let set = sm.apply(
            Instant::from_millis(1),
            Command::SetSemaphore {
                actor: Actor::new("root", &[Role::ClassAdmin]),
                namespace: "jobs".to_owned(),
                key: "pool".to_owned(),
                permits: 2,
                reason: "two workers".to_owned(),
            },
        );
        assert!(set.is_ok(), "{set:?}");
        let a = session(&mut sm, 10, "a");
        let b = session(&mut sm, 10, "b");
        let c = session(&mut sm, 10, "c");
        acquire_in(&mut sm, 1_000, a, 1, ("jobs", "pool"), LockMode::Permit);
        acquire_in(&mut sm, 2_000, b, 1, ("jobs", "pool"), LockMode::Permit);
        acquire_in(&mut sm, 3_000, c, 1, ("jobs", "pool"), LockMode::Permit); // queued
        assert_two_holds_and_a_waiter(&sm, "the oldest permit");
    }

    #[test]
    fn stats_name_the_oldest_hold_its_class_and_the_queue() {
        let mut sm = LockStateMachine::new(LockConfig::default());
        let admin = Actor::new("root", &[Role::ClassAdmin]);
        let mut class = ClassSpec::builtin_default(sm.config());
        class.name = "payments".to_owned();
        class.prefix = "order/".to_owned();
        class.fenced = true;
        class.hold_ms_max_expected = 600_000;
        class.owner = "team-orders".to_owned();
        class.runbook_url = "https://wiki.example.com/orders".to_owned();
        let put = sm.apply(
            Instant::from_millis(1),
            Command::PutClass {
                actor: admin,
                namespace: "orders".to_owned(),
                class,
            },
        );
        assert!(put.is_ok(), "{put:?}");
        let a = session(&mut sm, 10, "a");
        let b = session(&mut sm, 10, "b");
        let c = session(&mut sm, 10, "c");
        acquire(&mut sm, 1_000, a, 1, "orders", "order/17");
        acquire(&mut sm, 2_000, b, 1, "orders", "order/17"); // queued
        acquire(&mut sm, 3_000, c, 1, "orders", "order/17"); // queued
        acquire(&mut sm, 4_000, b, 2, "orders", "other");
        acquire(&mut sm, 5_000, c, 2, "billing", "run");

        let stats = namespace_stats(&sm, Instant::from_millis(901_000));
        assert_eq!(stats.len(), 2);
        let billing = &stats[0];
        assert_eq!(billing.namespace, "billing");
        assert_eq!((billing.holds, billing.waiters), (1, 0));
        let longest = billing.longest_hold.as_ref().unwrap();
        assert_eq!(longest.class, "default");
        assert!(longest.hold_max_expected.is_zero());

        let orders = &stats[1];
        assert_eq!(orders.namespace, "orders");
        assert_eq!((orders.holds, orders.waiters), (2, 2));
        assert_eq!(
            orders.longest_hold,
            Some(PagedHold {
                key: "order/17".to_owned(),
                held_for: Duration::from_secs(900),
                class: "payments".to_owned(),
                fenced: true,
                hold_max_expected: Duration::from_secs(600),
                queue_depth: 2,
                owner: "team-orders".to_owned(),
                runbook_url: "https://wiki.example.com/orders".to_owned(),
            })
        );

        // Through the metrics: the alert's two series for orders, none threshold for billing.
        let metrics = super::super::Metrics::with_external_url(Some("http://p:7480".to_owned()));
        metrics.set_namespace_stats(&stats);
        let text = metrics.encode();
        assert!(
            text.contains(
                "picket_longest_hold_seconds{namespace=\"orders\",key=\"order/17\",\
                 class=\"payments\",fenced=\"true\",owner=\"team-orders\",\
                 runbook_url=\"https://wiki.example.com/orders\",\
                 inspect_url=\"http://p:7480/v1/namespaces/orders/locks/order%2F17\",\
                 console_url=\"http://p:7480/console/keys/orders/order%2F17\"} 900.0\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "picket_longest_hold_threshold_seconds{namespace=\"orders\",class=\"payments\",\
             fenced=\"true\"} 600.0\n"
        ));
        assert!(!text.contains("picket_longest_hold_threshold_seconds{namespace=\"billing\""));
    }

    fn put_class(sm: &mut LockStateMachine, ns: &str, name: &str, prefix: &str, hold_ms: u64) {
        let mut class = ClassSpec::builtin_default(sm.config());
        class.name = name.to_owned();
        class.prefix = prefix.to_owned();
        class.fenced = hold_ms > 0;
        class.hold_ms_max_expected = hold_ms;
        let put = sm.apply(
            Instant::from_millis(1),
            Command::PutClass {
                actor: Actor::new("root", &[Role::ClassAdmin]),
                namespace: ns.to_owned(),
                class,
            },
        );
        assert!(put.is_ok(), "{put:?}");
    }

    /// Issue 33: an older hold of a class without a threshold (a nightly job) hid a younger
    /// fenced hold 7 minutes over its class's 30 s with a waiter queued. Every hold over its
    /// threshold is exported on its own, whatever else its namespace holds.
    #[test]
    fn every_hold_over_its_class_threshold_is_exported_whatever_is_older() {
        let mut sm = LockStateMachine::new(LockConfig::default());
        put_class(&mut sm, "jobs", "batch", "nightly/", 0);
        put_class(&mut sm, "jobs", "ledger", "ledger/", 30_000);
        let [nightly, writer, second, waiter] =
            ["nightly", "writer", "second", "waiter"].map(|name| session(&mut sm, 10, name));
        acquire(&mut sm, 1_000, nightly, 1, "jobs", "nightly/run");
        acquire(&mut sm, 60_000, writer, 1, "jobs", "ledger/a");
        acquire(&mut sm, 61_000, waiter, 1, "jobs", "ledger/a"); // queued
        acquire(&mut sm, 400_000, second, 1, "jobs", "ledger/b");
        acquire(&mut sm, 470_000, second, 2, "jobs", "ledger/young"); // 20 s: under 30 s

        let stats = namespace_stats(&sm, Instant::from_millis(490_000));
        assert_eq!(stats.len(), 1);
        let jobs = &stats[0];
        assert_eq!(
            jobs.longest_hold.as_ref().map(|h| h.key.as_str()),
            Some("nightly/run"),
            "the namespace's oldest hold, of a class without a threshold"
        );
        let overdue: Vec<(&str, u64, usize)> = jobs
            .overdue_holds
            .iter()
            .map(|h| (h.key.as_str(), h.held_for.as_secs(), h.queue_depth))
            .collect();
        assert_eq!(
            overdue,
            [("ledger/a", 430, 1), ("ledger/b", 90, 0)],
            "both holds over 30 s, furthest over first; nightly (no threshold) and ledger/young \
             (under) are not"
        );
        assert!(jobs.overdue_holds.iter().all(|h| h.class == "ledger"
            && h.fenced
            && h.hold_max_expected == Duration::from_secs(30)));

        let metrics = super::super::Metrics::with_external_url(Some("http://p:7480".to_owned()));
        metrics.set_namespace_stats(&stats);
        let text = metrics.encode();
        assert!(
            text.contains(
                "picket_overdue_hold_seconds{namespace=\"jobs\",key=\"ledger/a\",\
                 class=\"ledger\",fenced=\"true\",owner=\"\",\
                 runbook_url=\"http://p:7480/runbooks/stuck-lock.md?namespace=jobs&key=ledger%2Fa\",\
                 inspect_url=\"http://p:7480/v1/namespaces/jobs/locks/ledger%2Fa\",\
                 console_url=\"http://p:7480/console/keys/jobs/ledger%2Fa\"} 430.0\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "picket_overdue_hold_threshold_seconds{namespace=\"jobs\",key=\"ledger/a\"} 30.0\n"
        ));
        assert!(text
            .contains("picket_overdue_hold_queue_depth{namespace=\"jobs\",key=\"ledger/a\"} 1\n"));
        assert!(text.contains("picket_overdue_hold_seconds{namespace=\"jobs\",key=\"ledger/b\","));
        assert!(
            !text.contains("picket_overdue_hold_seconds{namespace=\"jobs\",key=\"nightly/run\"")
        );
        assert!(!text.contains("key=\"ledger/young\""));

        // Released: its series goes at the next refresh.
        let token = sm
            .inspect("jobs", "ledger/b", Instant::from_millis(491_000))
            .unwrap()
            .holder
            .unwrap()
            .token;
        let released = sm.apply(
            Instant::from_millis(491_000),
            Command::Release {
                session: second,
                proof: SessionProof::legacy(),
                request: RequestId(3),
                namespace: "jobs".to_owned(),
                key: "ledger/b".to_owned(),
                token,
            },
        );
        assert!(released.is_ok(), "{released:?}");
        metrics.set_namespace_stats(&namespace_stats(&sm, Instant::from_millis(492_000)));
        let text = metrics.encode();
        assert!(!text.contains("key=\"ledger/b\""), "{text}");
        assert!(text.contains("picket_overdue_hold_seconds{namespace=\"jobs\",key=\"ledger/a\","));
    }

    /// The bound: at most `OVERDUE_HOLDS_PER_NAMESPACE_MAX` per namespace, the furthest over.
    #[test]
    fn overdue_holds_are_bounded_per_namespace_furthest_over_first() {
        let mut sm = LockStateMachine::new(LockConfig::default());
        put_class(&mut sm, "jobs", "ledger", "", 1_000);
        let n = OVERDUE_HOLDS_PER_NAMESPACE_MAX + 5;
        for i in 0..n {
            let s = session(&mut sm, 10, &format!("s{i}"));
            acquire(&mut sm, 100 + i as u64, s, 1, "jobs", &format!("k{i:03}"));
        }
        let holds = sm.overdue_holds(
            Instant::from_millis(60_000),
            OVERDUE_HOLDS_PER_NAMESPACE_MAX,
            OVERDUE_HOLDS_MAX,
        );
        assert_eq!(holds.len(), OVERDUE_HOLDS_PER_NAMESPACE_MAX);
        let keys: Vec<String> = holds.iter().map(|h| h.key.clone()).collect();
        let oldest: Vec<String> = (0..OVERDUE_HOLDS_PER_NAMESPACE_MAX)
            .map(|i| format!("k{i:03}"))
            .collect();
        assert_eq!(keys, oldest);
    }
}
