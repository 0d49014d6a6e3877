use super::chart::{CHART_LEFT, CHART_WIDTH};
use super::*;

fn event(revision: u64, kind: proto::event::Kind) -> proto::Event {
    proto::Event {
        revision,
        time_ms: revision * 1_000,
        namespace: "orders".into(),
        key: "ledger/17".into(),
        identity: None,
        kind: Some(kind),
    }
}

fn key_now(revision: u64, queue_depth: u64) -> KeyView {
    KeyView::of(&proto::KeyInfo {
        revision,
        queue_depth,
        ..Default::default()
    })
}

#[test]
fn the_queue_drains_as_the_log_grants_its_waiters() {
    use proto::event::Kind;
    let granted = |session_id, token| {
        Kind::Granted(proto::event::Granted {
            session_id,
            token,
            ..Default::default()
        })
    };
    let queued = |session_id, position| {
        Kind::Queued(proto::event::Queued {
            session_id,
            position,
        })
    };
    let events = [
        event(3, granted(1, 3)),
        event(4, queued(2, 1)),
        event(5, queued(3, 2)),
        event(
            6,
            Kind::ForceReleased(proto::event::ForceReleased {
                session_id: 1,
                token: 3,
                force_release_id: 9,
                session_revoked: true,
            }),
        ),
        event(6, granted(2, 6)),
        event(
            7,
            Kind::Released(proto::event::Released {
                session_id: 2,
                token: 6,
                cause: proto::ReleaseCause::Released.into(),
            }),
        ),
        event(7, granted(3, 7)),
    ];
    let refs: Vec<&proto::Event> = events.iter().collect();
    let chart = QueueChart::of(&refs, true, &key_now(8, 0), 8_000);
    let depths: Vec<(u64, u64)> = chart.points.iter().map(|p| (p.revision, p.depth)).collect();
    assert_eq!(depths, [(3, 0), (4, 1), (5, 2), (6, 1), (7, 0), (8, 0)]);
    assert_eq!(chart.note, "");
    let release = release_of(&events, None).unwrap();
    assert_eq!(
        (release.request_id, release.token, release.revision),
        (9, 3, 6)
    );
    assert_eq!(release.next, "session 2 with token 6");
    assert!(release_of(&events, Some(8)).is_none());
    // A log that misses a waiter's arrival says so instead of drawing a false count.
    let chart = QueueChart::of(&refs[4..], true, &key_now(8, 1), 8_000);
    assert!(
        chart.note.contains("differs from the queue now (1)"),
        "{}",
        chart.note
    );
}

/// The x-axis is log time: three stuck minutes look wider than six seconds.
#[test]
fn the_chart_plots_the_queue_over_time_not_over_revisions() {
    use proto::event::Kind;
    let queued = |session_id| {
        Kind::Queued(proto::event::Queued {
            session_id,
            position: 1,
        })
    };
    let mut events = [
        event(3, queued(1)),
        event(4, queued(2)),
        event(5, queued(3)),
    ];
    events[0].time_ms = 0;
    events[1].time_ms = 6_000; // six seconds later
    events[2].time_ms = 186_000; // three minutes after that
    let refs: Vec<&proto::Event> = events.iter().collect();
    let chart = QueueChart::of(&refs, true, &key_now(6, 3), 186_000);
    let xs: Vec<u32> = chart.dots.iter().map(|(x, _, _)| *x).collect();
    assert_eq!(xs.len(), 4, "three events and now");
    let (first, second, third) = (xs[0], xs[1], xs[2]);
    assert!(
        (third - second) > 20 * (second - first),
        "3 minutes drawn wider than 6 s: {xs:?}"
    );
    assert_eq!(first, CHART_LEFT);
    assert_eq!(xs[3], CHART_WIDTH - 10, "now at the right edge");
}

#[test]
fn a_telling_counts_only_for_the_released_hold_or_the_sessions_end() {
    let release = ReleaseView {
        request_id: 9,
        session_id: 1,
        token: 3,
        revoked: false,
        revision: 6,
        time: String::new(),
        time_ms: 6_000,
        who: String::new(),
        next: String::new(),
    };
    let told = |loss, at_ms| Told {
        session_id: 1,
        loss,
        by: Channel::Keepalive,
        at_ms,
        revision: None,
    };
    let hold = |token| Loss::HoldLost {
        namespace: "orders".into(),
        key: "ledger/17".into(),
        token,
    };
    let row = told_row(2, told(hold(3), 7_500), "orders", "ledger/17", &release).unwrap();
    assert_eq!(row.what, "lost its hold (token 3)");
    assert_eq!(row.after, "1 s after the release");
    assert_eq!(row.by, "a keepalive answer");
    assert!(told_row(2, told(hold(4), 7_500), "orders", "ledger/17", &release).is_none());
    let ended = told_row(
        1,
        told(Loss::SessionEnded, 5_000),
        "orders",
        "ledger/17",
        &release,
    );
    assert!(ended.unwrap().after.contains("clocks differ"));
}
