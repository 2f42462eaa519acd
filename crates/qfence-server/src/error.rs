//! Every error the API answers, mapped to a status and a stable code in one place.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use qfence_model::config::Issue;

use qfence_runtime::auth::Access;
use qfence_runtime::backend::BackendError;
use qfence_runtime::dto::{ErrorBody, IssueDto, LeaderInfo};

/// An API error: a status, a stable code, a message for people, and details for some codes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Boxed: most errors have none, and results carrying an error stay small.
    pub details: Option<Box<Details>>,
}

/// What some codes carry besides the message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Details {
    pub current_generation: Option<u64>,
    pub issues: Option<Vec<IssueDto>>,
    pub leader: Option<LeaderInfo>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            details: None,
        }
    }

    /// 401: no token, or one the server does not know.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: the token's role is not enough.
    pub fn forbidden(have: Access, need: Access) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("this call needs the {need} role; the token has {have}"),
        )
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 405.
    pub fn method_not_allowed() -> Self {
        Self::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this path does not take this method; see /openapi.json",
        )
    }

    /// 422 with the validation issues of a plan or controller.
    pub fn validation(message: impl Into<String>, issues: &[Issue]) -> Self {
        let mut e = Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
            message,
        );
        e.details_mut().issues = Some(issues.iter().map(IssueDto::from).collect());
        e
    }

    /// 422 for a value that is well formed JSON of the right type but not acceptable.
    pub fn invalid_body(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body", message)
    }

    /// 415: not sent as JSON.
    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send the body as JSON with `Content-Type: application/json`",
        )
    }

    /// 413.
    pub fn body_too_large() -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!(
                "the body is larger than the {} byte limit",
                crate::api::BODY_LIMIT
            ),
        )
    }

    /// 400: not JSON at all.
    pub fn invalid_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_json", message)
    }

    /// 408/503 style: the call took too long.
    pub fn timeout() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            "the call did not finish in time; it may or may not have taken effect: check the \
             event log before retrying",
        )
    }

    /// 500: a bug. The message says so; the details are in the server's log.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    fn details_mut(&mut self) -> &mut Details {
        self.details.get_or_insert_with(Default::default)
    }

    /// The response body.
    pub fn body(&self) -> ErrorBody {
        let d = self.details.as_deref().cloned().unwrap_or_default();
        ErrorBody {
            code: self.code.to_owned(),
            message: self.message.clone(),
            current_generation: d.current_generation,
            issues: d.issues,
            leader: d.leader,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let mut resp = (status, Json(self.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        resp
    }
}

impl From<BackendError> for ApiError {
    fn from(e: BackendError) -> Self {
        let message = e.to_string();
        match e {
            BackendError::NotFound { .. } => ApiError::not_found(message),
            BackendError::StaleGeneration { current, .. } => {
                let mut a = ApiError::new(StatusCode::CONFLICT, "stale_generation", message);
                a.details_mut().current_generation = Some(current);
                a
            }
            BackendError::Conflict(_) => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            BackendError::Refused(_) => ApiError::new(StatusCode::CONFLICT, "refused", message),
            BackendError::Invalid { issues, .. } => ApiError::validation(message, &issues),
            BackendError::CapabilityFailed { issues, .. } => {
                let mut a = ApiError::new(StatusCode::CONFLICT, "capability_failed", message);
                a.details_mut().issues = Some(issues.iter().map(IssueDto::from).collect());
                a
            }
            BackendError::BindingCheckFailed { issues, .. } => {
                let mut a = ApiError::new(StatusCode::CONFLICT, "binding_check_failed", message);
                a.details_mut().issues = Some(issues.iter().map(IssueDto::from).collect());
                a
            }
            BackendError::NotLeader { leader } => {
                let mut a = ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "not_leader", message);
                if let Some(l) = &leader
                    && let Some(name) = &l.leader
                {
                    a.message = format!("{}; the leader is {name}", a.message);
                }
                a.details_mut().leader = leader;
                a
            }
            BackendError::Unavailable(_) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        let text = r.body_text();
        match r {
            JsonRejection::JsonDataError(_) => ApiError::invalid_body(format!(
                "the body does not fit the request's schema: {}",
                trim_rejection(&text)
            )),
            JsonRejection::JsonSyntaxError(_) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                format!("the body is not valid JSON: {}", trim_rejection(&text)),
            ),
            JsonRejection::MissingJsonContentType(_) => ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with `Content-Type: application/json`",
            ),
            JsonRejection::BytesRejection(_) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    format!(
                        "the body is larger than the {} byte limit",
                        crate::api::BODY_LIMIT
                    ),
                )
            }
            other => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                format!("the body could not be read: {}", other.body_text()),
            ),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            format!(
                "the query string does not fit: {}",
                trim_rejection(&r.body_text())
            ),
        )
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> Self {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_path",
            format!("the path does not fit: {}", r.body_text()),
        )
    }
}

/// axum's messages start with a generic sentence before the useful part.
fn trim_rejection(text: &str) -> &str {
    for prefix in [
        "Failed to deserialize the JSON body into the target type: ",
        "Failed to parse the request body as JSON: ",
        "Failed to deserialize query string: ",
    ] {
        if let Some(rest) = text.strip_prefix(prefix) {
            return rest;
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_generation_is_a_409_with_the_current_one() {
        let e: ApiError = BackendError::StaleGeneration {
            plan: "erp-db".into(),
            expected: 3,
            current: 5,
        }
        .into();
        assert_eq!(e.status, StatusCode::CONFLICT);
        assert_eq!(e.code, "stale_generation");
        assert_eq!(e.body().current_generation, Some(5));
        assert!(e.message.contains("generation 5, not 3"), "{}", e.message);
    }
}
