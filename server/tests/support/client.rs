//! Requests the tests make through the client library (`picket_client`) or picketctl,
//! whichever way they start the cluster: `tests/support` (plain clusters), `tests/common` (OIDC
//! clusters) and the tests of an in-process dev cluster include this one file.

#![allow(dead_code)]

use picket_client::{Client, Credentials};
use picket_proto::proto;

/// Insecure dev auth: `principal` with the comma-separated `roles`, believed from metadata.
pub fn dev_credentials(principal: &str, roles: &str) -> Credentials {
    Credentials {
        principal: Some(principal.to_owned()),
        roles: Some(roles.to_owned()),
        bearer: None,
    }
}

/// An OIDC access token, and nothing else.
pub fn bearer(token: String) -> Credentials {
    Credentials {
        bearer: Some(token),
        ..Credentials::default()
    }
}

/// A fenced class `name` over the keys `name/…`, with sessions of `ttl_ms_default` ms unless the
/// client asks for another TTL, `ttl_ms_max` at the most; no owner, no runbook.
pub fn fenced_class(name: &str, ttl_ms_default: u64, ttl_ms_max: u64) -> proto::ClassSpec {
    proto::ClassSpec {
        name: name.into(),
        prefix: format!("{name}/"),
        fenced: true,
        session_ttl_ms_default: ttl_ms_default,
        session_ttl_ms_max: ttl_ms_max,
        ..Default::default()
    }
}

/// [`fenced_class`] `name` (10 s sessions, `ttl_ms_max` at the most) owned by `team-ledger`,
/// described as "`name` writes", a hold above `hold_ms_max_expected` being one to page about,
/// and `runbook_url` (empty: none).
pub fn owned_class(
    name: &str,
    ttl_ms_max: u64,
    hold_ms_max_expected: u64,
    runbook_url: &str,
) -> proto::ClassSpec {
    proto::ClassSpec {
        hold_ms_max_expected,
        owner: "team-ledger".into(),
        runbook_url: runbook_url.into(),
        description: format!("{name} writes"),
        ..fenced_class(name, 10_000, ttl_ms_max)
    }
}

/// Puts `class` into namespace `ns`, which `client` must be allowed to do.
pub async fn put_class(client: &Client, ns: &str, class: proto::ClassSpec) {
    let request = proto::PutClassRequest {
        namespace: ns.into(),
        class: Some(class),
    };
    client.put_class(request).await.unwrap();
}

/// The linearizable inspection of `ns`/`key`.
pub async fn inspect_key(client: &Client, ns: &str, key: &str) -> proto::KeyInfo {
    let request = proto::InspectRequest {
        namespace: ns.into(),
        key: key.into(),
        allow_stale: false,
    };
    client.inspect(request).await.unwrap()
}

/// A request to force-release `ns`/`key` held with `token`, without the advisory checklist,
/// revoking the holder's session or not.
pub fn force_release_request(
    ns: &str,
    key: &str,
    token: u64,
    reason: &str,
    revoke_session: bool,
) -> proto::RequestForceReleaseRequest {
    proto::RequestForceReleaseRequest {
        namespace: ns.into(),
        key: key.into(),
        expected_token: token,
        reason: reason.into(),
        revoke_session,
        holder_session_id: 0,
        checklist: None,
    }
}

/// Waits (10 s at the most) until `ns`/`key` has `depth` waiters.
pub async fn until_queue(client: &Client, ns: &str, key: &str, depth: u64) {
    for _ in 0..200 {
        if inspect_key(client, ns, key).await.queue_depth == depth {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{key} never had {depth} waiting");
}

/// `requested` approved by `client`, who acknowledges its kind (fenced or not) as it is.
pub async fn approve_as_requested(
    client: &Client,
    requested: &proto::RequestForceReleaseResponse,
) -> proto::ApproveForceReleaseResponse {
    client
        .approve_force_release(approval_of(requested))
        .await
        .unwrap()
}

/// The approval of `requested`, acknowledging its kind (fenced or not) as it is.
pub fn approval_of(
    requested: &proto::RequestForceReleaseResponse,
) -> proto::ApproveForceReleaseRequest {
    proto::ApproveForceReleaseRequest {
        force_release_id: requested.force_release_id,
        acknowledged_fenced: requested.fenced,
    }
}

/// A try (no wait) for an exclusive hold of `ns`/`key` by `session` with its `secret`, as its
/// request `request_id`.
pub fn try_acquire_request(
    session: u64,
    request_id: u64,
    ns: &str,
    key: &str,
    secret: Vec<u8>,
) -> proto::AcquireRequest {
    proto::AcquireRequest {
        session_id: session,
        request_id,
        namespace: ns.into(),
        key: key.into(),
        wait_ms: 0,
        wait_timeout_ms: 0,
        session_secret: secret,
        mode: 0,
    }
}

/// The answers to the advisory checklist that let picketctl send a force-release request: the
/// holder has stopped, and a second writer is not acceptable.
pub const CHECKLIST_ANSWERED: [&str; 4] =
    ["--holder-stopped", "yes", "--double-run-acceptable", "no"];

/// picketctl's arguments `force-release request NS KEY --token TOKEN --reason REASON`, then
/// `flags`.
pub fn force_release_args<'a>(
    ns: &'a str,
    key: &'a str,
    token: &'a str,
    reason: &'a str,
    flags: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "force-release",
        "request",
        ns,
        key,
        "--token",
        token,
        "--reason",
        reason,
    ];
    args.extend_from_slice(flags);
    args
}

/// What the spawned `task` returned, within 10 s (`what`: what the test waits for).
pub async fn joined<T, E: std::fmt::Debug>(
    task: tokio::task::JoinHandle<Result<T, E>>,
    what: &str,
) -> T {
    let joined = tokio::time::timeout(std::time::Duration::from_secs(10), task).await;
    joined.expect(what).unwrap().unwrap()
}

/// `f` of each item of the JSON array `list` (a picketctl or HTTP answer's), in order.
pub fn each<'a, T>(list: &'a serde_json::Value, f: impl Fn(&'a serde_json::Value) -> T) -> Vec<T> {
    list.as_array().unwrap().iter().map(f).collect()
}

/// picketctl's arguments `classes put NS --name NAME` (flags to add after them).
pub fn class_put_args<'a>(ns: &'a str, name: &'a str) -> Vec<&'a str> {
    vec!["classes", "put", ns, "--name", name]
}

/// Asserts that the text `json[field]` (of a picketctl or HTTP answer) contains `part`.
#[track_caller]
pub fn assert_says(json: &serde_json::Value, field: &str, part: &str) {
    let text = json[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field}: {json}"));
    assert!(text.contains(part), "{field} lacks {part:?}: {json}");
}
