//! The error answers the API's calls share, declared once. Each is an [`ErrorBody`] with a
//! stable `code`; a handler names the sets that apply to it in `responses(...)`, after its
//! own answers, and a described tuple listed after a set replaces that set's entry (a 409's
//! reason differs from call to call).

use std::collections::BTreeMap;

use utoipa::IntoResponses;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder, response::Response};

#[cfg(doc)]
use qfence_runtime::dto::ErrorBody;

/// `(status, description)` pairs, each answered with an [`ErrorBody`].
fn error_bodies(list: &[(u16, &str)]) -> BTreeMap<String, RefOr<Response>> {
    list.iter()
        .map(|(status, description)| {
            let content = ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build();
            let response = ResponseBuilder::new()
                .description(*description)
                .content("application/json", content)
                .build();
            (status.to_string(), RefOr::T(response))
        })
        .collect()
}

macro_rules! error_set {
    ($(#[$doc:meta])* $name:ident: $(($status:literal, $description:expr)),+ $(,)?) => {
        $(#[$doc])*
        pub(crate) struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                error_bodies(&[$(($status, $description)),+])
            }
        }
    };
}

const UNAUTHORIZED: &str = "No bearer token, or one this orchestrator does not know";
const FORBIDDEN: &str = "The token's role may not do this";
const UNAVAILABLE: &str = "No leader is reachable, or the cluster did not answer in time";

error_set!(
    /// 401 alone, for a call that answers without the replicated state.
    Unauthorized: (401, UNAUTHORIZED)
);
error_set!(
    /// 403 alone, for a call that answers without the replicated state.
    Forbidden: (403, FORBIDDEN)
);
error_set!(
    /// A viewer's call that reads the replicated state.
    Viewer: (401, UNAUTHORIZED), (503, UNAVAILABLE)
);
error_set!(
    /// An operator's or an admin's call that reads or writes the replicated state.
    Writer: (401, UNAUTHORIZED), (403, FORBIDDEN), (503, UNAVAILABLE)
);
error_set!(
    /// A call on a named plan, site or controller.
    NotFound: (404, "No such plan, site or controller")
);
error_set!(
    /// A call whose query string is read.
    BadQuery: (400, "The query is not well-formed")
);
error_set!(
    /// A call with a JSON body.
    JsonBody:
        (400, "The body or a path parameter is not well-formed"),
        (413, "The body is larger than the API accepts"),
        (415, "The body is not application/json"),
        (422, "Not valid: every issue with its path"),
);
error_set!(
    /// A call refused because of the state it found.
    Conflict: (409, "The current state does not allow it")
);

/// A set made of other sets, for a group of calls that always name them together.
macro_rules! union_set {
    ($(#[$doc:meta])* $name:ident: $($part:ident),+ $(,)?) => {
        $(#[$doc])*
        pub(crate) struct $name;

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                let mut all = BTreeMap::new();
                $(all.extend($part::responses());)+
                all
            }
        }
    };
}

union_set!(
    /// An operator's or an admin's call with a JSON body on a named plan: the plan
    /// operations and the staging calls.
    PlanWrite: Writer, NotFound, JsonBody
);
error_set!(
    /// A switchover or a failover refused: the plan moved on, or the move is not safe.
    RefusedForSafety: (409, "Stale generation, or refused for safety")
);
error_set!(
    /// A call on one site refused: the plan moved on, or the site owns the plan.
    RefusedSiteOwns: (409, "Stale generation, or refused (the site owns the plan)")
);
