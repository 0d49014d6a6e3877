//! Extractors whose refusals are the documented JSON error (docs/http.md, "Errors"), with the
//! rule `invalid_argument` and the parameter at fault, instead of the framework's plain-text
//! messages: `?limit=abc`, `?stale=maybe` and `/v1/sessions/abc/told` are answered like every
//! other bad request.

use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use axum::response::Response;
use picket_proto::proto;
use serde::de::DeserializeOwned;
use tonic::{Code, Status};

use super::{error_response, HttpCluster};

/// A refusal of a bad parameter: `invalid_argument`, naming the parameter (`field`).
pub fn invalid_parameter(field: &str, message: impl Into<String>) -> Status {
    let message = message.into();
    picket_proto::status::detail_status(
        Code::InvalidArgument,
        proto::ErrorDetail {
            rule: picket_proto::status::rule::INVALID_ARGUMENT.to_owned(),
            message,
            field: field.to_owned(),
            ..proto::ErrorDetail::default()
        },
        None,
    )
}

/// `Query<T>` that refuses a query string it cannot read with the JSON error.
#[derive(Debug)]
pub struct JsonQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for JsonQuery<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(JsonQuery(value)),
            Err(rejection) => {
                let text = rejection.body_text();
                // serde_urlencoded names the parameter first: "limit: invalid digit ...".
                let field = text
                    .rsplit_once("deserialize query string: ")
                    .map_or(text.as_str(), |(_, rest)| rest)
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_owned();
                let field = if field.contains(' ') {
                    String::new()
                } else {
                    field
                };
                Err(error_response(
                    &invalid_parameter(&field, format!("the query string: {text}")),
                    &HttpCluster::default(),
                ))
            }
        }
    }
}

/// `Path<T>` that refuses a path segment it cannot read with the JSON error.
#[derive(Debug)]
pub struct JsonPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for JsonPath<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(JsonPath(value)),
            Err(rejection) => Err(error_response(
                &invalid_parameter("path", format!("the path: {}", rejection.body_text())),
                &HttpCluster::default(),
            )),
        }
    }
}
