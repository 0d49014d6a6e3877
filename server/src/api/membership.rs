//! `Admin.AddMember`, `PromoteMember` and `RemoveMember`: the requests checked and turned into
//! the driver's [`ChangeRequest`], and the answer (docs/operations.md, "Changing the
//! membership").

use picket_core::paxos::{MemberAddress, NodeId, ADDRESS_MAX, REASON_MAX};
use picket_proto::error::ConvertError;
use picket_proto::proto;
use tonic::Status;

use crate::node::members::{ChangeRequest, MemberChange, MembershipChanged};

pub fn add_request(r: proto::AddMemberRequest, actor: String) -> Result<ChangeRequest, Status> {
    let id = node_id(r.node_id, "add_member.node_id")?;
    let address = MemberAddress {
        id,
        peer: host_port(r.peer_address, "add_member.peer_address", true)?,
        client: host_port(r.client_address, "add_member.client_address", true)?,
        http: host_port(r.http_address, "add_member.http_address", false)?,
    };
    Ok(ChangeRequest {
        change: MemberChange::Add(address),
        actor,
        actor_roles: Vec::new(),
        reason: reason(r.reason, "add_member.reason")?,
        // Adding a learner changes no quorum: nothing to force.
        force: false,
    })
}

pub fn promote_request(
    r: proto::PromoteMemberRequest,
    actor: String,
) -> Result<ChangeRequest, Status> {
    Ok(ChangeRequest {
        change: MemberChange::Promote(node_id(r.node_id, "promote_member.node_id")?),
        actor,
        actor_roles: Vec::new(),
        reason: reason(r.reason, "promote_member.reason")?,
        force: r.force,
    })
}

pub fn remove_request(
    r: proto::RemoveMemberRequest,
    actor: String,
) -> Result<ChangeRequest, Status> {
    Ok(ChangeRequest {
        change: MemberChange::Remove(node_id(r.node_id, "remove_member.node_id")?),
        actor,
        actor_roles: Vec::new(),
        reason: reason(r.reason, "remove_member.reason")?,
        force: r.force,
    })
}

pub fn response(changed: MembershipChanged) -> proto::MembershipChangeResponse {
    let m = changed.membership;
    proto::MembershipChangeResponse {
        voters: m.voters.iter().map(|n| n.0).collect(),
        learners: m.learners.iter().map(|n| n.0).collect(),
        from_slot: changed.from_slot.0,
    }
}

fn node_id(id: u64, field: &str) -> Result<NodeId, Status> {
    if id == 0 {
        return Err(ConvertError::new(field, "node id 0 is reserved: ids start at 1").into());
    }
    Ok(NodeId(id))
}

fn reason(reason: String, field: &str) -> Result<String, Status> {
    if reason.trim().is_empty() {
        return Err(
            ConvertError::new(field, "a reason is required (it goes to the audit log)").into(),
        );
    }
    if reason.len() > REASON_MAX {
        let message = format!("{} bytes, at most {REASON_MAX}", reason.len());
        return Err(ConvertError::new(field, message).into());
    }
    Ok(reason)
}

/// `host:port` with a non-empty host and a port 1..=65535 (`""` allowed unless `required`).
fn host_port(address: String, field: &str, required: bool) -> Result<String, Status> {
    if address.is_empty() && !required {
        return Ok(address);
    }
    if !crate::config::is_host_port(&address)
        || address.len() > ADDRESS_MAX
        || address.contains(char::is_whitespace)
    {
        let message = format!("{address:?} is not host:port (at most {ADDRESS_MAX} bytes)");
        return Err(ConvertError::new(field, message).into());
    }
    Ok(address)
}

#[cfg(test)]
mod tests {
    use super::*;
    use picket_proto::status::error_detail;

    #[test]
    fn bad_requests_name_their_field() {
        let good = proto::AddMemberRequest {
            node_id: 4,
            peer_address: "10.0.0.4:7000".into(),
            client_address: "10.0.0.4:7001".into(),
            http_address: String::new(),
            reason: "replace n3".into(),
        };
        let ok = add_request(good.clone(), "alice".into()).unwrap();
        assert_eq!(ok.actor, "alice");
        let cases = [
            (
                proto::AddMemberRequest {
                    node_id: 0,
                    ..good.clone()
                },
                "add_member.node_id",
            ),
            (
                proto::AddMemberRequest {
                    peer_address: "10.0.0.4".into(),
                    ..good.clone()
                },
                "add_member.peer_address",
            ),
            (
                proto::AddMemberRequest {
                    client_address: String::new(),
                    ..good.clone()
                },
                "add_member.client_address",
            ),
            (
                proto::AddMemberRequest {
                    http_address: ":80".into(),
                    ..good.clone()
                },
                "add_member.http_address",
            ),
            (
                proto::AddMemberRequest {
                    reason: " ".into(),
                    ..good
                },
                "add_member.reason",
            ),
        ];
        for (request, field) in cases {
            let status = add_request(request, "alice".into()).unwrap_err();
            let detail = error_detail(&status).unwrap();
            assert_eq!(
                (detail.rule.as_str(), detail.field.as_str()),
                ("invalid_argument", field)
            );
        }
        let long = proto::RemoveMemberRequest {
            node_id: 2,
            reason: "x".repeat(REASON_MAX + 1),
            force: false,
        };
        let status = remove_request(long, "alice".into()).unwrap_err();
        assert_eq!(error_detail(&status).unwrap().field, "remove_member.reason");
    }
}
