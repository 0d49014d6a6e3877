//! The fenced resource: a tiny gRPC service (`proto/picket/sim/v1/resource.proto`) guarded by
//! `picket_client::FencingGate` (`check` for writes, `check_slot` for semaphore permit holders'
//! writes, fenced per slot, `check_read` for shared holders' reads),
//! recording every access it accepts in the history (checker 2), and the clients' side of it
//! ([`write_as`], [`read_as`]).

use std::time::Duration;

use picket_client::{FencingError, FencingGate};
use picket_core::locks::Token;
use tonic::{Request, Response, Status};

use super::addr::{resource_ip, RESOURCE_PORT};
use super::shared::{lock, Break, SharedRef};
use crate::history::{Accepted, Access, Refused};
use crate::proto::resource_client::ResourceClient;
use crate::proto::resource_server::{Resource, ResourceServer};
use crate::proto::{ReadRequest, ReadResponse, WriteRequest, WriteResponse};

pub struct FencedResource {
    gate: FencingGate,
    shared: SharedRef,
}

impl FencedResource {
    /// Records the gate's decision on one access; answers (accepted, refusal).
    fn decide(
        &self,
        access: Access,
        (key, slot): (String, Option<u32>),
        token: u64,
        client: u64,
        checked: Result<(), FencingError>,
    ) -> (bool, String) {
        let what = match (access, slot) {
            (Access::Write, None) => "write".to_string(),
            (Access::Write, Some(slot)) => format!("write (slot {slot})"),
            (Access::Read, _) => "read".to_string(),
        };
        let mut s = lock(&self.shared);
        match checked {
            Ok(()) => {
                let at_ms = s.now_ms();
                s.trace(&format!(
                    "resource accepted {what} {key} token {token} client {client}"
                ));
                s.count(match access {
                    Access::Write => "writes-accepted",
                    Access::Read => "reads-accepted",
                });
                s.history.accepted.push(Accepted {
                    key,
                    token,
                    client,
                    at_ms,
                    access,
                    slot,
                });
                (true, String::new())
            }
            Err(refusal) => {
                s.trace(&format!("resource refused {what} {key} token {token}"));
                s.count(match access {
                    Access::Write => "writes-refused",
                    Access::Read => "reads-refused",
                });
                if slot.is_some() {
                    s.count("slot-writes-refused");
                }
                let (at_ms, accepted_before) = (s.now_ms(), s.history.accepted.len());
                s.history.refused.push(Refused {
                    key,
                    token,
                    client,
                    at_ms,
                    access,
                    slot,
                    accepted_before,
                });
                (false, refusal.to_string())
            }
        }
    }
}

#[tonic::async_trait]
impl Resource for FencedResource {
    async fn write(
        &self,
        request: Request<WriteRequest>,
    ) -> Result<Response<WriteResponse>, Status> {
        let req = request.into_inner();
        let broken = lock(&self.shared).broken;
        let checked = match req.slot {
            None if broken == Some(Break::GateBypass) => Ok(()),
            None => self.gate.check(&req.key, Token(req.token)),
            Some(_) if broken == Some(Break::SlotBypass) => Ok(()),
            Some(slot) => self.gate.check_slot(&req.key, slot, Token(req.token)),
        };
        let unit = (req.key, req.slot);
        let (accepted, refusal) =
            self.decide(Access::Write, unit, req.token, req.client_id, checked);
        Ok(Response::new(WriteResponse { accepted, refusal }))
    }

    async fn read(&self, request: Request<ReadRequest>) -> Result<Response<ReadResponse>, Status> {
        let req = request.into_inner();
        let bypass = lock(&self.shared).broken == Some(Break::ReadBypass);
        let checked = if bypass {
            Ok(())
        } else {
            self.gate.check_read(&req.key, Token(req.token))
        };
        let (accepted, refusal) = self.decide(
            Access::Read,
            (req.key, None),
            req.token,
            req.client_id,
            checked,
        );
        Ok(Response::new(ReadResponse { accepted, refusal }))
    }
}

/// The resource node's `init` future: serves forever.
pub async fn resource_main(shared: SharedRef) {
    let addr = std::net::SocketAddr::new(resource_ip(), RESOURCE_PORT);
    let service = FencedResource {
        gate: FencingGate::new(1_024),
        shared,
    };
    let served = tonic::transport::Server::builder()
        .add_service(ResourceServer::new(service))
        .serve(addr)
        .await;
    if let Err(error) = served {
        panic!("fenced resource stopped serving: {error}");
    }
    std::future::pending::<()>().await;
}

/// A connection to the fenced resource (opened on first use, dropped after a failure).
pub type ResourceConn = ResourceClient<tonic::transport::Channel>;

/// The connection, opened if there is none.
async fn connect(resource: &mut Option<ResourceConn>) -> Option<&mut ResourceConn> {
    if resource.is_none() {
        let url = format!("http://{}:{RESOURCE_PORT}", resource_ip());
        *resource = ResourceClient::connect(url).await.ok();
    }
    resource.as_mut()
}

/// Writes to the fenced resource with `token` as client `client_id`: an exclusive holder's
/// write (`slot` None), or a semaphore permit holder's in its `slot`.
pub async fn write_as(
    client_id: u64,
    resource: &mut Option<ResourceConn>,
    key: &str,
    slot: Option<u32>,
    token: u64,
) {
    let Some(client) = connect(resource).await else {
        return;
    };
    let request = WriteRequest {
        key: key.to_string(),
        token,
        client_id,
        payload: Vec::new(),
        slot,
    };
    let sent = tokio::time::timeout(Duration::from_millis(500), client.write(request)).await;
    if !matches!(sent, Ok(Ok(_))) {
        *resource = None;
    }
}

/// Reads from the fenced resource with a shared holder's `token` as client `client_id`.
pub async fn read_as(client_id: u64, resource: &mut Option<ResourceConn>, key: &str, token: u64) {
    let Some(client) = connect(resource).await else {
        return;
    };
    let request = ReadRequest {
        key: key.to_string(),
        token,
        client_id,
    };
    let sent = tokio::time::timeout(Duration::from_millis(500), client.read(request)).await;
    if !matches!(sent, Ok(Ok(_))) {
        *resource = None;
    }
}
