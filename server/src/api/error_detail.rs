//! [`ErrorDetailLayer`]: a tower layer on the client gRPC server that gives every refusal the
//! standard-form detail (`google.rpc.Status` with `ErrorDetail` and `ErrorInfo`, see
//! [`picket_proto::status::detail_status`]), including the refusals the gRPC library answers by
//! itself before any Picket code runs: a request message above the size limit, bytes that are
//! not the method's protobuf, an unknown service or method.
//!
//! A response whose `grpc-status` is non-zero and that has no `grpc-status-details-bin` gets one
//! ([`picket_proto::status::with_standard_detail`]), wherever the status is: in the headers of a
//! "trailers-only" response (how tonic answers a unary error or a stream that fails to open) or
//! in the trailers at the end of the body (a stream that fails later). Statuses that already
//! carry details (every status Picket code builds) pass unchanged.
//!
//! Real sockets only: the simulator's tonic shim ignores tower layers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body_util::BodyExt;
use tonic::codegen::http::{self, HeaderMap};
use tonic::codegen::Service;
use tonic::{Code, Status};
use tower::layer::util::{Identity, Stack};
use tower::Layer;

const GRPC_STATUS: &str = "grpc-status";
const GRPC_MESSAGE: &str = "grpc-message";
const GRPC_STATUS_DETAILS: &str = "grpc-status-details-bin";

/// A gRPC server's router with the layer on.
pub type DetailedRouter = tonic::transport::server::Router<Stack<ErrorDetailLayer, Identity>>;

/// Wraps a gRPC service in [`WithErrorDetail`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ErrorDetailLayer;

impl<S> Layer<S> for ErrorDetailLayer {
    type Service = WithErrorDetail<S>;

    fn layer(&self, inner: S) -> WithErrorDetail<S> {
        WithErrorDetail { inner }
    }
}

/// `inner`, with the standard-form detail added to every refusal that lacks one.
#[derive(Clone, Debug)]
pub struct WithErrorDetail<S> {
    inner: S,
}

impl<S, B> Service<http::Request<B>> for WithErrorDetail<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method: Arc<str> = request.uri().path().into();
        let call = self.inner.call(request);
        Box::pin(async move {
            let response = call.await?;
            let (mut parts, body) = response.into_parts();
            add_detail(&mut parts.headers, &method);
            let body = body.map_frame(move |mut frame| {
                if let Some(trailers) = frame.trailers_mut() {
                    add_detail(trailers, &method);
                }
                frame
            });
            Ok(http::Response::from_parts(
                parts,
                tonic::body::Body::new(body),
            ))
        })
    }
}

/// Adds `grpc-status-details-bin` (and a `grpc-message` if there is none) to `headers` when they
/// hold a non-zero `grpc-status` without details. `method` is the request path.
pub fn add_detail(headers: &mut HeaderMap, method: &str) {
    let Some(code) = headers.get(GRPC_STATUS) else {
        return;
    };
    if Code::from_bytes(code.as_bytes()) == Code::Ok || headers.contains_key(GRPC_STATUS_DETAILS) {
        return;
    }
    let Some(status) = Status::from_header_map(headers) else {
        return;
    };
    let detailed = picket_proto::status::with_standard_detail(status, method);
    let mut encoded = HeaderMap::new();
    if let Err(error) = detailed.add_header(&mut encoded) {
        tracing::warn!(%error, method, "a refusal's detail could not be encoded: sent without");
        return;
    }
    for name in [GRPC_MESSAGE, GRPC_STATUS_DETAILS] {
        if let Some(value) = encoded.remove(name) {
            headers.insert(name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use picket_proto::status::error_detail;

    fn headers_of(status: Status) -> HeaderMap {
        let response: http::Response<()> = status.into_http();
        response.headers().clone()
    }

    #[test]
    fn a_bare_refusal_gets_a_rule_and_keeps_its_code_and_message() {
        let mut headers = headers_of(Status::out_of_range(
            "Error, decoded message length too large: found 9 bytes, the limit is: 8 bytes",
        ));
        add_detail(&mut headers, "/picket.v1.Lock/Acquire");
        let status = Status::from_header_map(&headers).unwrap();
        assert_eq!(status.code(), Code::OutOfRange);
        assert!(status
            .message()
            .starts_with("Error, decoded message length too large"));
        assert_eq!(error_detail(&status).unwrap().rule, "message_too_large");
    }

    #[test]
    fn an_unknown_method_is_named() {
        let mut headers = headers_of(Status::unimplemented(""));
        add_detail(&mut headers, "/picket.v1.Nope/Call");
        let status = Status::from_header_map(&headers).unwrap();
        assert_eq!(status.code(), Code::Unimplemented);
        assert!(status.message().contains("/picket.v1.Nope/Call"));
        assert_eq!(error_detail(&status).unwrap().rule, "unknown_method");
    }

    /// A stream that fails after it opened: the status is in the trailers at the end of the body.
    #[tokio::test]
    async fn a_status_in_the_trailers_gets_a_rule_too() {
        let inner = tower::service_fn(|_request: http::Request<()>| async {
            let trailers = headers_of(Status::internal(
                "failed to decode Protobuf message: invalid wire type value: 7",
            ));
            let body = http_body_util::Empty::<tonic::codegen::Bytes>::new()
                .with_trailers(async move { Some(Ok(trailers)) });
            Ok::<_, std::convert::Infallible>(http::Response::new(tonic::body::Body::new(body)))
        });
        let mut service = ErrorDetailLayer.layer(inner);
        let request = http::Request::builder()
            .uri("/picket.v1.Lock/KeepAlive")
            .body(())
            .unwrap();
        let response = service.call(request).await.unwrap();
        assert!(response.headers().get(GRPC_STATUS).is_none());
        let collected = response.into_body().collect().await.unwrap();
        let status = Status::from_header_map(collected.trailers().unwrap()).unwrap();
        assert_eq!(status.code(), Code::Internal);
        assert_eq!(error_detail(&status).unwrap().rule, "malformed_request");
    }

    #[test]
    fn detailed_refusals_and_successes_pass_unchanged() {
        let busy = headers_of(picket_proto::status::busy_status("waits"));
        let mut headers = busy.clone();
        add_detail(&mut headers, "/picket.v1.Lock/Acquire");
        assert_eq!(headers, busy);

        let ok = headers_of(Status::ok(""));
        let mut headers = ok.clone();
        add_detail(&mut headers, "/picket.v1.Lock/Acquire");
        assert_eq!(headers, ok);

        let mut none = HeaderMap::new();
        add_detail(&mut none, "/picket.v1.Lock/Acquire");
        assert!(
            none.is_empty(),
            "a response without a status (headers of a stream)"
        );
    }
}
