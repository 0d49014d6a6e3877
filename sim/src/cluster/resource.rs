//! The fenced resource: a tiny gRPC service (`proto/picket/sim/v1/resource.proto`) guarded by
//! `picket_net::FencingGate`, recording every write it accepts in the history (checker 2), and
//! the clients' side of it ([`write_as`]).

use std::time::Duration;

use picket_core::locks::Token;
use picket_net::FencingGate;
use tonic::{Request, Response, Status};

use super::addr::{resource_ip, RESOURCE_PORT};
use super::shared::{lock, Break, SharedRef};
use crate::history::WriteAccepted;
use crate::proto::resource_client::ResourceClient;
use crate::proto::resource_server::{Resource, ResourceServer};
use crate::proto::{WriteRequest, WriteResponse};

pub struct FencedResource {
    gate: FencingGate,
    shared: SharedRef,
}

#[tonic::async_trait]
impl Resource for FencedResource {
    async fn write(
        &self,
        request: Request<WriteRequest>,
    ) -> Result<Response<WriteResponse>, Status> {
        let req = request.into_inner();
        let bypass = lock(&self.shared).broken == Some(Break::GateBypass);
        let checked = if bypass {
            Ok(())
        } else {
            self.gate.check(&req.key, Token(req.token))
        };
        let mut s = lock(&self.shared);
        match checked {
            Ok(()) => {
                let at_ms = s.now_ms();
                s.trace(&format!(
                    "resource accepted {} token {} client {}",
                    req.key, req.token, req.client_id
                ));
                s.count("writes-accepted");
                s.history.writes.push(WriteAccepted {
                    key: req.key,
                    token: req.token,
                    client: req.client_id,
                    at_ms,
                });
                Ok(Response::new(WriteResponse {
                    accepted: true,
                    refusal: String::new(),
                }))
            }
            Err(refusal) => {
                s.trace(&format!("resource refused {} token {}", req.key, req.token));
                s.count("writes-refused");
                Ok(Response::new(WriteResponse {
                    accepted: false,
                    refusal: refusal.to_string(),
                }))
            }
        }
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

/// Writes to the fenced resource with `token` as client `client_id`.
pub async fn write_as(client_id: u64, resource: &mut Option<ResourceConn>, key: &str, token: u64) {
    if resource.is_none() {
        let url = format!("http://{}:{RESOURCE_PORT}", resource_ip());
        *resource = ResourceClient::connect(url).await.ok();
    }
    let Some(client) = resource.as_mut() else {
        return;
    };
    let request = WriteRequest {
        key: key.to_string(),
        token,
        client_id,
        payload: Vec::new(),
    };
    let sent = tokio::time::timeout(Duration::from_millis(500), client.write(request)).await;
    if !matches!(sent, Ok(Ok(_))) {
        *resource = None;
    }
}
