use super::*;

fn orders(key: &str, held_s: u64, threshold_s: u64) -> NamespaceStats {
    NamespaceStats {
        namespace: "orders".to_owned(),
        holds: 3,
        waiters: 4,
        overdue_holds: Vec::new(),
        longest_hold: Some(PagedHold {
            key: key.to_owned(),
            held_for: Duration::from_millis(held_s * 1000 + 500),
            class: "payments".to_owned(),
            fenced: true,
            hold_max_expected: Duration::from_secs(threshold_s),
            queue_depth: 3,
            owner: "team-orders".to_owned(),
            runbook_url: String::new(),
        }),
    }
}

fn lines_with<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

#[test]
fn longest_hold_series_follow_the_key_and_the_namespaces() {
    let metrics = Metrics::new();
    metrics.set_namespace_stats(&[orders("order/17", 700, 600)]);
    let text = metrics.encode();
    assert_eq!(
        lines_with(&text, "picket_longest_hold_seconds{"),
        [
            "picket_longest_hold_seconds{namespace=\"orders\",key=\"order/17\",class=\"payments\",\
          fenced=\"true\",owner=\"team-orders\",runbook_url=\"\",inspect_url=\"\",console_url=\"\"} 700.5"
        ]
    );
    assert_eq!(
        lines_with(&text, "picket_longest_hold_threshold_seconds{"),
        [
            "picket_longest_hold_threshold_seconds{namespace=\"orders\",class=\"payments\",\
             fenced=\"true\"} 600.0"
        ]
    );
    assert!(
        text.contains("picket_longest_hold_queue_depth{namespace=\"orders\",key=\"order/17\"} 3\n")
    );
    assert!(text.contains("picket_holds{namespace=\"orders\"} 3\n"));
    assert!(text.contains("picket_waiters{namespace=\"orders\"} 4\n"));
    assert!(text.contains("# TYPE picket_longest_hold_seconds gauge\n"));

    // The key changes: the old series is gone, not left at its last value.
    metrics.set_namespace_stats(&[orders("order/18", 5, 600)]);
    let text = metrics.encode();
    assert!(!text.contains("order/17"), "{text}");
    assert!(text.contains("picket_longest_hold_seconds{namespace=\"orders\",key=\"order/18\","));
    assert!(
        text.contains("inspect_url=\"\",console_url=\"\"} 5.5\n"),
        "{text}"
    );

    // The namespace has no holds any more: its series disappear.
    metrics.set_namespace_stats(&[]);
    let text = metrics.encode();
    assert!(!text.contains("orders"), "{text}");
}

#[test]
fn no_threshold_series_without_a_class_threshold() {
    let metrics = Metrics::new();
    metrics.set_namespace_stats(&[orders("k", 10, 0)]);
    let text = metrics.encode();
    assert!(lines_with(&text, "picket_longest_hold_threshold_seconds{").is_empty());
    assert_eq!(lines_with(&text, "picket_longest_hold_seconds{").len(), 1);
}

#[test]
fn label_values_are_escaped() {
    let metrics = Metrics::new();
    metrics.set_namespace_stats(&[orders("a\"b\\c\nd", 1, 0)]);
    let text = metrics.encode();
    assert!(
        text.contains(r#"picket_longest_hold_seconds{namespace="orders",key="a\"b\\c\nd","#),
        "{text}"
    );
}

#[test]
fn the_longest_hold_carries_its_class_and_links_to_the_key() {
    let metrics = Metrics::with_external_url(Some("https://picket.example.com/".to_owned()));
    metrics.set_namespace_stats(&[orders("order/17 ü", 700, 600)]);
    let text = metrics.encode();
    // Picket's stuck-lock runbook (the class has none) and the key as one escaped segment.
    assert_eq!(
        lines_with(&text, "picket_longest_hold_seconds{"),
        [
            "picket_longest_hold_seconds{namespace=\"orders\",key=\"order/17 ü\",\
             class=\"payments\",fenced=\"true\",owner=\"team-orders\",\
             runbook_url=\"https://picket.example.com/runbooks/stuck-lock.md?namespace=orders&key=order%2F17%20%C3%BC\",\
             inspect_url=\"https://picket.example.com/v1/namespaces/orders/locks/\
             order%2F17%20%C3%BC\",\
             console_url=\"https://picket.example.com/console/keys/orders/\
             order%2F17%20%C3%BC\"} 700.5"
        ]
    );
    // The class's own runbook wins.
    let mut stats = orders("k", 700, 600);
    if let Some(hold) = &mut stats.longest_hold {
        hold.runbook_url = "https://wiki.example.com/orders".to_owned();
    }
    metrics.set_namespace_stats(&[stats]);
    let text = metrics.encode();
    assert!(
        text.contains("runbook_url=\"https://wiki.example.com/orders\""),
        "{text}"
    );
    assert_eq!(lines_with(&text, "picket_longest_hold_seconds{").len(), 1);
    assert!(text.contains("picket_external_url_info{url=\"https://picket.example.com\"} 1\n"));
    assert!(!Metrics::new()
        .encode()
        .contains("picket_external_url_info{"));
}

#[test]
fn paxos_role_ballot_and_slots() {
    let metrics = Metrics::new();
    let text = metrics.encode();
    assert!(
        text.contains("picket_paxos_role{role=\"follower\"} 1\n"),
        "{text}"
    );
    metrics.set_paxos(PaxosStats {
        role: RoleKind::Leader,
        ballot_round: 7,
        ballot_node_id: 2,
        slot_chosen: 120,
        slot_applied: 118,
    });
    let text = metrics.encode();
    assert!(text.contains("picket_paxos_role{role=\"leader\"} 1\n"));
    assert!(text.contains("picket_paxos_role{role=\"follower\"} 0\n"));
    assert!(text.contains("picket_paxos_ballot_round 7\n"));
    assert!(text.contains("picket_paxos_ballot_node_id 2\n"));
    assert!(text.contains("picket_paxos_slot_chosen 120\n"));
    assert!(text.contains("picket_paxos_slot_applied 118\n"));
    metrics.set_sessions(42);
    assert!(metrics.encode().contains("picket_sessions 42\n"));
}

#[test]
fn fsync_histogram_and_request_counters() {
    let metrics = Metrics::new();
    metrics.observe_fsync(Duration::from_micros(80));
    metrics.observe_fsync(Duration::from_millis(3));
    metrics.observe_request("Admin/Inspect", Code::Ok, Duration::from_millis(2));
    metrics.observe_request("Admin/Inspect", Code::Ok, Duration::from_millis(4));
    metrics.observe_request("Lock/Acquire", Code::Unavailable, Duration::from_millis(1));
    let text = metrics.encode();
    assert!(text.contains("# TYPE picket_storage_fsync_seconds histogram\n"));
    assert!(
        text.contains("picket_storage_fsync_seconds_count 2\n"),
        "{text}"
    );
    // 80 µs is above the first bucket (50 µs) and within the second (100 µs).
    assert!(
        text.contains("picket_storage_fsync_seconds_bucket{le=\"5e-5\"} 0\n")
            || text.contains("picket_storage_fsync_seconds_bucket{le=\"0.00005\"} 0\n"),
        "{text}"
    );
    assert!(text.contains("picket_grpc_requests_total{method=\"Admin/Inspect\",code=\"OK\"} 2\n"));
    assert!(text
        .contains("picket_grpc_requests_total{method=\"Lock/Acquire\",code=\"Unavailable\"} 1\n"));
    assert!(text.contains(
        "picket_grpc_request_duration_seconds_count{method=\"Admin/Inspect\",code=\"OK\"} 2\n"
    ));
    assert!(text.trim_end().ends_with("# EOF"));
}

#[test]
fn request_methods_are_bounded() {
    let metrics = Metrics::new();
    for i in 0..METHODS_MAX + 5 {
        metrics.observe_request(&format!("/probe/{i}"), Code::Unimplemented, Duration::ZERO);
    }
    metrics.observe_request("/probe/0", Code::Unimplemented, Duration::ZERO);
    let text = metrics.encode();
    let series = lines_with(&text, "picket_grpc_requests_total{");
    assert_eq!(series.len(), METHODS_MAX + 1, "{text}");
    assert!(
        text.contains("picket_grpc_requests_total{method=\"other\",code=\"Unimplemented\"} 5\n")
    );
    assert!(
        text.contains("picket_grpc_requests_total{method=\"/probe/0\",code=\"Unimplemented\"} 2\n")
    );
}

#[test]
fn storage_condition_series() {
    use crate::node::durable::RecoveryOutcome;
    let metrics = Metrics::new();
    metrics.set_recovery(
        RecoveryOutcome::DurableStateLost,
        Duration::from_millis(250),
        7,
    );
    metrics.set_durable_state_lost(true, Duration::from_secs(90));
    metrics.inc_fsync_errors();
    metrics.set_compaction(Duration::from_millis(80));
    let text = metrics.encode();
    let mut recoveries = lines_with(&text, "picket_storage_recoveries_total{");
    recoveries.sort_unstable();
    assert_eq!(
        recoveries,
        [
            "picket_storage_recoveries_total{outcome=\"clean\"} 0",
            "picket_storage_recoveries_total{outcome=\"durable_state_lost\"} 1",
            "picket_storage_recoveries_total{outcome=\"torn_tail_cut\"} 0",
        ]
    );
    for line in [
        "picket_storage_recovery_seconds 0.25\n",
        "picket_replica_starts_total 7\n",
        "picket_storage_durable_state_lost 1\n",
        "picket_storage_durable_state_lost_seconds 90.0\n",
        "picket_storage_fsync_errors_total 1\n",
        "picket_storage_compaction_seconds 0.08\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    // Re-learned: the gauge drops, the time spent stays.
    metrics.set_durable_state_lost(false, Duration::from_secs(95));
    let text = metrics.encode();
    assert!(text.contains("picket_storage_durable_state_lost 0\n"));
    assert!(text.contains("picket_storage_durable_state_lost_seconds 95.0\n"));
}

#[test]
fn counters_kept_by_the_peer_transport_and_the_push_feed_are_read_at_every_scrape() {
    use std::sync::Arc;

    use crate::node::peer::PeerCounters;

    let metrics = Metrics::new();
    let peers = Arc::new(PeerCounters::default());
    metrics.add_counters(peers.clone());
    PeerCounters::add(&peers.connects, 2);
    PeerCounters::add(&peers.messages_sent, 5);
    PeerCounters::add(&peers.messages_dropped_inbound_full, 3);
    PeerCounters::add(&peers.dials_failed, 7);
    let text = metrics.encode();
    assert_eq!(
        lines_with(&text, "picket_peer_connects_total"),
        ["picket_peer_connects_total 2"]
    );
    assert_eq!(
        lines_with(&text, "picket_peer_dials_failed_total"),
        ["picket_peer_dials_failed_total 7"]
    );
    assert_eq!(
        lines_with(&text, "picket_peer_messages_sent_total"),
        ["picket_peer_messages_sent_total 5"]
    );
    let drops = lines_with(&text, "picket_peer_messages_dropped_total");
    assert_eq!(drops.len(), 4, "{text}");
    assert!(drops.contains(&"picket_peer_messages_dropped_total{reason=\"inbound_full\"} 3"));
    assert!(drops.contains(&"picket_peer_messages_dropped_total{reason=\"unreachable\"} 0"));
    assert!(
        text.contains("# TYPE picket_peer_messages_dropped counter"),
        "{text}"
    );
    // Read live: a later scrape sees the new value.
    PeerCounters::add(&peers.connects, 1);
    assert_eq!(
        lines_with(&metrics.encode(), "picket_peer_connects_total"),
        ["picket_peer_connects_total 3"]
    );
    // The push feed's counter.
    metrics.add_counters(Arc::new(crate::api::session_push::LogFeed::default()));
    assert_eq!(
        lines_with(&metrics.encode(), "picket_session_pushes_dropped_total"),
        ["picket_session_pushes_dropped_total 0"]
    );
}

#[test]
fn backups_export_their_interval_last_success_and_outcomes() {
    let m = Metrics::new();
    let text = m.encode();
    assert!(
        text.contains("picket_backup_interval_seconds 0.0\n"),
        "{text}"
    );
    assert!(
        text.contains("picket_backup_last_success_timestamp_seconds 0.0\n"),
        "{text}"
    );
    m.set_backup_interval(Duration::from_secs(3_600));
    m.observe_backup("failed", None);
    m.observe_backup("ok", Some(Duration::from_secs(1_700_000_000)));
    let text = m.encode();
    assert!(
        text.contains("picket_backup_interval_seconds 3600.0\n"),
        "{text}"
    );
    assert!(
        text.contains("picket_backup_last_success_timestamp_seconds 1700000000.0\n"),
        "{text}"
    );
    assert!(
        text.contains("picket_backups_total{outcome=\"ok\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("picket_backups_total{outcome=\"failed\"} 1\n"),
        "{text}"
    );
}
