//! [`DriverInspect`]: the HTTP endpoint's [`InspectSource`] over a replica's [`DriverHandle`].
//!
//! Reads are exactly `Admin.Inspect` / `Admin.ListHolds`: validated as the gRPC edge validates
//! them, linearizable (read-index on the leader; a follower answers `not_leader`) unless
//! `allow_stale`, errors mapped by `picket_proto::status`.

use picket_core::locks::{HoldInfo, KeyInfo};
use picket_core::node::{Answer, Query};
use picket_proto::convert::api::{InspectQuery, ListHoldsQuery};
use picket_proto::proto;
use picket_proto::status::lock_error_status;
use tonic::Status;

use crate::api::http::{BoxFuture, Health, HealthMember, InspectSource};
use crate::node::driver::{DriverHandle, Request};

/// The inspection source of a running replica.
#[derive(Clone, Debug)]
pub struct DriverInspect {
    pub driver: DriverHandle,
}

impl DriverInspect {
    async fn read(&self, query: Query, stale: bool) -> Result<Answer, Status> {
        let (_, answer) = self
            .driver
            .ask(|reply| Request::Read {
                query,
                stale,
                reply,
            })
            .await??;
        Ok(answer)
    }
}

fn unexpected(answer: &Answer) -> Status {
    Status::internal(format!("the node answered a read with {answer:?}"))
}

impl InspectSource for DriverInspect {
    fn inspect(
        &self,
        namespace: String,
        key: String,
        allow_stale: bool,
    ) -> BoxFuture<'_, Result<KeyInfo, Status>> {
        Box::pin(async move {
            let q = InspectQuery::try_from(proto::InspectRequest {
                namespace,
                key,
                allow_stale,
            })?;
            match self.read(q.query(), q.allow_stale).await? {
                Answer::Key(info) => (*info).map_err(|e| lock_error_status(&e)),
                other => Err(unexpected(&other)),
            }
        })
    }

    fn list_holds(
        &self,
        namespace: String,
        limit: usize,
        allow_stale: bool,
    ) -> BoxFuture<'_, Result<Vec<HoldInfo>, Status>> {
        Box::pin(async move {
            let q = ListHoldsQuery::try_from(proto::ListHoldsRequest {
                namespace,
                limit: u32::try_from(limit).unwrap_or(u32::MAX),
                allow_stale,
            })?;
            match self.read(q.query(), q.allow_stale).await? {
                Answer::Holds(holds) => holds.map_err(|e| lock_error_status(&e)),
                other => Err(unexpected(&other)),
            }
        })
    }

    fn health(&self) -> BoxFuture<'_, Health> {
        Box::pin(async move {
            let id = self.driver.id.0;
            match self.driver.ask(|reply| Request::Status { reply }).await {
                Ok(status) => {
                    let detail = status.not_serving_because().unwrap_or_default().to_owned();
                    let http = self.driver.http_endpoints();
                    let members = status
                        .members(|n| self.driver.endpoint_of(n))
                        .into_iter()
                        .map(|m| HealthMember {
                            node_id: m.id.0,
                            client_endpoint: m.client_endpoint,
                            http_endpoint: http.get(m.id.0).unwrap_or_default(),
                            voter: m.voter,
                            slot_applied: m.slot_applied,
                        })
                        .collect();
                    Health {
                        ready: detail.is_empty(),
                        node_id: id,
                        role: crate::metrics::role_name(status.role).to_owned(),
                        leader_node_id: status.leader.map(|l| l.0),
                        slot_applied: status.slot_applied,
                        detail,
                        storage: status.storage,
                        members,
                        membership_from_slot: status.membership_from,
                    }
                }
                Err(status) => Health {
                    ready: false,
                    node_id: id,
                    role: "stopped".to_owned(),
                    leader_node_id: None,
                    slot_applied: 0,
                    detail: status.to_string(),
                    storage: Default::default(),
                    members: Vec::new(),
                    membership_from_slot: 0,
                },
            }
        })
    }
}
