//! [`Observed`]: a gRPC service wrapper that counts every call and its latency in
//! [`Metrics::observe_request`] by method (the request path) and code.
//!
//! The code is the response's `grpc-status` header when the handler answered with an error
//! (tonic sends errors as "trailers-only" responses), `OK` otherwise. For streaming calls
//! (`KeepAlive`, `Watch`) the latency is the time to open the stream and the code is how it
//! opened: errors later in a stream are not counted here.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::codegen::http;
use tonic::codegen::Service;
use tonic::server::NamedService;
use tonic::Code;

use crate::metrics::Metrics;

/// `inner`, with its calls observed in `metrics`.
#[derive(Clone)]
pub struct Observed<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S> Observed<S> {
    pub fn new(inner: S, metrics: Arc<Metrics>) -> Observed<S> {
        Observed { inner, metrics }
    }
}

impl<S: NamedService> NamedService for Observed<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B, R> Service<http::Request<B>> for Observed<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.uri().path().to_owned();
        let started = std::time::Instant::now();
        let call = self.inner.call(request);
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let response = call.await;
            if let Ok(response) = &response {
                metrics.observe_request(&method, response_code(response), started.elapsed());
            }
            response
        })
    }
}

/// The `grpc-status` of a trailers-only response, else `OK`.
fn response_code<R>(response: &http::Response<R>) -> Code {
    response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map_or(Code::Ok, Code::from_i32)
}
