//! The typed error of every proto -> core conversion.

use thiserror::Error;

use crate::proto;
use crate::status::{detail_status, rule};

/// Malformed input: a missing required field, a bad name, an oversize text, an unknown enum
/// value, a zero id. `field` is the path of the offending field from the request's root, e.g.
/// `acquire.namespace` or `snapshot.sessions[3].identity`; `rule` says what it must be.
///
/// Converts into `tonic::Status` with code `INVALID_ARGUMENT`, the message `"{field}: {rule}"`
/// and an [`proto::ErrorDetail`] with rule `invalid_argument` and the field.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{field}: {rule}")]
pub struct ConvertError {
    pub field: String,
    pub rule: String,
}

impl ConvertError {
    pub fn new(field: impl Into<String>, rule: impl Into<String>) -> ConvertError {
        ConvertError {
            field: field.into(),
            rule: rule.into(),
        }
    }

    /// A required field (a message or a oneof) is absent.
    pub fn required(field: impl Into<String>) -> ConvertError {
        ConvertError::new(field, "required")
    }

    /// Places the error under `parent`: `key` becomes `parent.key`.
    #[must_use]
    pub fn within(self, parent: &str) -> ConvertError {
        let field = if self.field.is_empty() {
            parent.to_owned()
        } else if self.field.starts_with('[') {
            format!("{parent}{}", self.field)
        } else {
            format!("{parent}.{}", self.field)
        };
        ConvertError { field, ..self }
    }

    /// The `ErrorDetail` of this error (rule `invalid_argument`, the field), e.g. for one
    /// refused entry of the `KeepAlive` stream.
    pub fn detail(&self) -> proto::ErrorDetail {
        proto::ErrorDetail {
            rule: rule::INVALID_ARGUMENT.to_owned(),
            message: self.to_string(),
            field: self.field.clone(),
            ..proto::ErrorDetail::default()
        }
    }

    /// Places the error under element `index` of the repeated field `parent`.
    #[must_use]
    pub fn at(self, parent: &str, index: usize) -> ConvertError {
        self.within(&format!("{parent}[{index}]"))
    }
}

impl From<ConvertError> for tonic::Status {
    fn from(error: ConvertError) -> tonic::Status {
        let message = error.to_string();
        let detail = proto::ErrorDetail {
            rule: rule::INVALID_ARGUMENT.to_owned(),
            message: message.clone(),
            field: error.field,
            ..proto::ErrorDetail::default()
        };
        detail_status(tonic::Code::InvalidArgument, detail, None)
    }
}

/// Why bytes could not be read as a record or message.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// Not valid protobuf for the expected message (truncated, bad wire type, bad UTF-8, ...).
    #[error("not a valid protobuf {message}: {source}")]
    Protobuf {
        message: &'static str,
        #[source]
        source: prost::DecodeError,
    },
    /// Valid protobuf that breaks a rule of the core type.
    #[error(transparent)]
    Invalid(#[from] ConvertError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_compose() {
        let error = ConvertError::required("identity")
            .at("sessions", 3)
            .within("snapshot");
        assert_eq!(error.field, "snapshot.sessions[3].identity");
        assert_eq!(error.to_string(), "snapshot.sessions[3].identity: required");
        assert_eq!(ConvertError::required("").within("a").field, "a");
    }

    #[test]
    fn becomes_invalid_argument_naming_the_field() {
        let status: tonic::Status = ConvertError::new("acquire.key", "too long").into();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), "acquire.key: too long");
        let detail = crate::status::error_detail(&status).expect("detail attached");
        assert_eq!(detail.rule, "invalid_argument");
        assert_eq!(detail.field, "acquire.key");
    }
}
