//! The hello a connection opens with: checked rule by rule, the version both ends speak, and
//! the refusal of a peer whose release does not support the cluster version.

use super::*;

#[test]
fn a_hello_is_checked_rule_by_rule() {
    let me = link(2, "c");
    let hello = |v, c: &str, from, to| hello_of(hello_frame(v, c, from, to).kind.unwrap());
    assert_eq!(
        check_hello(&hello(PEER_PROTOCOL_VERSION, "c", 1, 2), &me),
        Ok(NodeId(1))
    );
    let rule = |h: proto::PeerHello| check_hello(&h, &me).unwrap_err().rule;
    assert_eq!(
        rule(hello(PEER_PROTOCOL_VERSION + 1, "c", 1, 2)),
        "peer_protocol_version"
    );
    assert_eq!(rule(hello(0, "c", 1, 2)), "peer_protocol_version");
    assert_eq!(
        rule(hello(PEER_PROTOCOL_VERSION, "other", 1, 2)),
        "peer_cluster_id"
    );
    assert_eq!(
        rule(hello(PEER_PROTOCOL_VERSION, "c", 1, 3)),
        "peer_wrong_recipient"
    );
    for from in [0, 2, 9] {
        assert_eq!(
            rule(hello(PEER_PROTOCOL_VERSION, "c", from, 2)),
            "peer_not_a_member"
        );
    }
    // The message says what was wrong in words.
    let refused = check_hello(&hello(7, "c", 1, 2), &me).unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("versions 7 to 7, this replica 1 to 1"),
        "{refused}"
    );
    // The dialer's check of the answer: it must come from the node it meant. A hello of
    // release 0.1 names no release and no cluster version: 0.1, cluster version 1.
    let dialer = link(1, "c");
    let answer = hello(PEER_PROTOCOL_VERSION, "c", 2, 1);
    let told = check_answer(&answer, &dialer, NodeId(2)).unwrap();
    assert_eq!((told.release_text(), told.cluster_version_max), ("0.1", 1));
    assert_eq!(told.protocol, PEER_PROTOCOL_VERSION);
    // This release's own hello says what it is.
    let ours = hello_of(frame::hello(&dialer, NodeId(2)).kind.unwrap());
    let told = check_answer(
        &proto::PeerHello {
            from_node_id: 2,
            to_node_id: 1,
            ..ours
        },
        &dialer,
        NodeId(2),
    )
    .unwrap();
    assert_eq!(told.release, crate::version::VERSION);
    assert_eq!(
        told.cluster_version_max,
        picket_core::locks::CLUSTER_VERSION
    );
    assert_eq!(
        check_answer(&answer, &dialer, NodeId(3)).unwrap_err().rule,
        "peer_wrong_recipient"
    );
}

#[test]
fn two_ends_talk_the_highest_version_both_speak() {
    use frame::{negotiate, protocol_range};
    // Release N speaks N-1's version as well as its own: the connection uses the highest.
    assert_eq!(negotiate((1, 2), (1, 1)), Some(1));
    assert_eq!(negotiate((1, 1), (1, 2)), Some(1));
    assert_eq!(negotiate((1, 2), (2, 3)), Some(2));
    assert_eq!(negotiate((2, 3), (1, 2)), Some(2));
    assert_eq!(negotiate((1, 1), (1, 1)), Some(1));
    // No version in common: refused.
    assert_eq!(negotiate((1, 1), (2, 3)), None);
    assert_eq!(negotiate((3, 4), (1, 2)), None);
    assert_eq!(negotiate((0, 0), (0, 0)), None);
    // A hello without a minimum (release 0.1) speaks its one version; a minimum above the
    // maximum is read as the maximum.
    let hello = |max, min| proto::PeerHello {
        protocol_version: max,
        protocol_version_min: min,
        ..proto::PeerHello::default()
    };
    assert_eq!(protocol_range(&hello(1, 0)), (1, 1));
    assert_eq!(protocol_range(&hello(3, 2)), (2, 3));
    assert_eq!(protocol_range(&hello(2, 5)), (2, 2));
    // A dialer whose range reaches this replica's is accepted, with the range in the hello.
    let me = link(2, "c");
    let wide = proto::PeerHello {
        protocol_version: PEER_PROTOCOL_VERSION + 1,
        protocol_version_min: PEER_PROTOCOL_VERSION,
        cluster_id: "c".into(),
        from_node_id: 1,
        to_node_id: 2,
        ..proto::PeerHello::default()
    };
    assert_eq!(check_hello(&wide, &me), Ok(NodeId(1)));
    let above = proto::PeerHello {
        protocol_version_min: PEER_PROTOCOL_VERSION + 1,
        ..wide
    };
    let refused = check_hello(&above, &me).unwrap_err();
    assert_eq!(refused.rule, "peer_protocol_version");
}

#[test]
fn after_the_step_a_peer_of_a_release_that_does_not_support_it_is_refused_both_ways() {
    let me = link(2, "c");
    let hello_of_01 = proto::PeerHello {
        protocol_version: PEER_PROTOCOL_VERSION,
        cluster_id: "c".into(),
        from_node_id: 1,
        to_node_id: 2,
        ..proto::PeerHello::default()
    };
    // Unknown (0) or at 1: a replica of 0.1 is a peer like any other (a rolling upgrade).
    assert_eq!(check_hello(&hello_of_01, &me), Ok(NodeId(1)));
    me.members.set_cluster_version(1);
    assert_eq!(check_hello(&hello_of_01, &me), Ok(NodeId(1)));
    // Stepped to 2: it is refused as a dialer, and its answer is refused when this one dials.
    me.members.set_cluster_version(2);
    let refused = check_hello(&hello_of_01, &me).unwrap_err();
    assert_eq!(refused.rule, "peer_cluster_version");
    assert!(
        refused
            .to_string()
            .contains("cluster version 2; node 1 runs release 0.1"),
        "{refused}"
    );
    let answer_of_01 = proto::PeerHello {
        from_node_id: 1,
        to_node_id: 2,
        ..hello_of_01.clone()
    };
    assert_eq!(
        check_answer(&answer_of_01, &me, NodeId(1))
            .unwrap_err()
            .rule,
        "peer_cluster_version"
    );
    // A release that supports 2 is welcome.
    let hello_of_02 = proto::PeerHello {
        cluster_version_max: 2,
        release: "0.2.0".into(),
        ..hello_of_01
    };
    assert_eq!(check_hello(&hello_of_02, &me), Ok(NodeId(1)));
}
