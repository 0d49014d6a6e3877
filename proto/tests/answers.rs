//! Validated queries become node queries; node answers become responses or statuses.

use picket_core::locks::{AuditPage, LockError, NameError, Revision, SessionId};
use picket_core::node::{Answer, Query};
use picket_proto::convert::api::{InspectQuery, ListHoldsQuery, LIST_LIMIT_DEFAULT};
use picket_proto::proto;
use tonic::Code;

#[test]
fn requests_become_node_queries() {
    let inspect = InspectQuery::try_from(proto::InspectRequest {
        namespace: "orders".into(),
        key: "k".into(),
        allow_stale: true,
    })
    .unwrap();
    assert!(inspect.allow_stale);
    assert_eq!(
        inspect.query(),
        Query::Inspect {
            namespace: "orders".into(),
            key: "k".into()
        }
    );
    let holds = ListHoldsQuery::try_from(proto::ListHoldsRequest {
        namespace: "orders".into(),
        limit: 0,
        allow_stale: false,
    })
    .unwrap();
    assert_eq!(
        holds.query(),
        Query::ListHolds {
            namespace: "orders".into(),
            limit: LIST_LIMIT_DEFAULT
        }
    );
}

#[test]
fn answers_become_responses_or_statuses() {
    let refused = proto::KeyInfo::from_answer(Answer::Key(Box::new(Err(LockError::BadName(
        NameError::KeyEmpty,
    )))))
    .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);

    let holds =
        proto::ListHoldsResponse::from_answer(Answer::Holds(Ok(vec![])), Revision(12)).unwrap();
    assert_eq!(holds.revision, 12);
    assert!(holds.holds.is_empty());

    let audit = proto::QueryAuditResponse::from_answer(Answer::Audit(AuditPage {
        records: vec![],
        compacted_through: Revision(4),
    }))
    .unwrap();
    assert_eq!(audit.compacted_through, 4);

    let unknown =
        proto::ListClassesResponse::from_answer(Answer::Classes(Err(LockError::UnknownSession {
            session: SessionId(1),
        })))
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    let wrong = proto::ListForceReleasesResponse::from_answer(Answer::LongestHolds {
        longest: vec![],
        overdue: vec![],
    })
    .unwrap_err();
    assert_eq!(wrong.code(), Code::Internal);
    assert!(wrong.message().contains("expected a ForceReleases answer"));
}
