//! The verify page, `/console/verify/{namespace}/{key}` (`?request=ID`: the force-release to
//! verify; default: the key's newest), where the approval's outcome leads: the key's lock log
//! (read with `Watch` as the signed-in person, the log the gRPC service serves), the queue's
//! depth over the log's revisions as a chart with a table beside it, when the released holder's
//! client was told of its loss (gathered from every replica's `GET /v1/sessions/{id}/told`,
//! [`crate::api::told`]) and the key's alert at Alertmanager ([`super::alerts`]). Live like the
//! key page: the lock log's `change` events and a poll fetch its live part (`?part=state`) again.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use picket_client::{Client, ClientError};
use picket_proto::proto;
use serde::Deserialize;

use super::alerts::{AlertView, AlertsView};
use super::signin::SignedIn;
use super::view::{self, encode_path, KeyView};
use super::{inspect, message, render, Console, Refused, Viewer, Who};
use crate::api::http::sessions_told::ToldJson;
use crate::api::told::{Channel, Loss, Told};
use crate::wall_clock::{duration, utc};

mod chart;
pub use chart::{QueueChart, QueuePoint};

/// Events of the key kept from its lock log at most (the newest; the queue is counted over them).
const LOG_EVENTS_MAX: usize = 2_000;
/// Rows of the log table shown (the newest).
pub const LOG_ROWS_SHOWN: usize = 50;
/// Revisions the chart shows at most (the newest).
pub const CHART_POINTS_MAX: usize = 100;
/// How long to wait for the next page of the log before taking it as read up to now: the
/// `Watch` stream sends no empty page, so a key quiet since its last event sends nothing.
const LOG_PAGE_WAIT: Duration = Duration::from_millis(800);
/// One replica's answer about what it told, at most.
const TOLD_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Deserialize)]
pub(super) struct VerifyQuery {
    request: Option<u64>,
    part: Option<String>,
}

#[derive(Template)]
#[template(path = "console/verify.html")]
struct VerifyPage {
    who: Option<Who>,
    v: VerifyView,
    live_href: String,
    state_href: String,
    key_href: String,
    audit_href: String,
    error: Option<Refused>,
}

#[derive(Template)]
#[template(path = "console/verify_state.html")]
struct VerifyState {
    v: VerifyView,
}

/// One row of the key's lock log.
pub struct LogRow {
    pub revision: u64,
    pub time: String,
    pub what: String,
    pub session_id: u64,
    /// `name on host (pid N)`, `""` when the event kept no identity.
    pub who: String,
    pub principal: String,
}

/// The force-release being verified, from its lock-log event.
pub struct ReleaseView {
    pub request_id: u64,
    pub session_id: u64,
    pub token: u64,
    pub revoked: bool,
    pub revision: u64,
    pub time: String,
    pub time_ms: u64,
    /// The released holder, as its session said it was.
    pub who: String,
    /// The grant the release handed the key to (`""`: nobody).
    pub next: String,
}

/// One telling, as a replica recorded it.
pub struct ToldRow {
    pub replica: u64,
    pub by: &'static str,
    pub what: String,
    pub at: String,
    pub at_ms: u64,
    /// Time after the release's log time.
    pub after: String,
}

/// When the released holder's client was told.
pub struct ToldView {
    /// Every telling recorded about the released hold or the end of its session, oldest first.
    pub rows: Vec<ToldRow>,
    /// Replicas that could not be asked, with why.
    pub not_asked: Vec<String>,
    /// While nobody recorded telling it: what will.
    pub pending: String,
}

/// Everything the verify page shows.
pub struct VerifyView {
    pub k: KeyView,
    /// The current holders in words (`""`: free).
    pub held_by: String,
    pub log: Vec<LogRow>,
    pub log_events: usize,
    /// The first revision read; `complete`: from the log's beginning (nothing compacted).
    pub log_from: u64,
    pub log_complete: bool,
    pub chart: QueueChart,
    pub release: Option<ReleaseView>,
    /// `?request=ID` asked for a release the log does not show.
    pub release_missing: Option<u64>,
    pub told: Option<ToldView>,
    pub alerts: AlertsView,
    /// The key's own alerts (when Alertmanager answered).
    pub key_alerts: Vec<AlertView>,
}

pub(super) async fn verify_page(
    State(console): State<Console>,
    Viewer(user): Viewer,
    Path((namespace, key)): Path<(String, String)>,
    Query(query): Query<VerifyQuery>,
) -> Response {
    let v = match gather(&console, &user, &namespace, &key, query.request).await {
        Ok(v) => v,
        Err(error) => {
            return message(
                Some(Who::of(&user)),
                Refused::status(&error),
                &format!("Verify {namespace} / {key}"),
                Some(Refused::of(&error)),
                vec![],
            )
        }
    };
    if query.part.as_deref() == Some("state") {
        return render(&VerifyState { v }, StatusCode::OK);
    }
    let (ns, encoded) = (
        encode_path(&namespace).replace('/', "%2F"),
        encode_path(&key),
    );
    let state_href = match query.request {
        Some(id) => format!(
            "{}?request={id}&part=state",
            verify_href(&namespace, &key, None)
        ),
        None => format!("{}?part=state", verify_href(&namespace, &key, None)),
    };
    let page = VerifyPage {
        who: Some(Who::of(&user)),
        v,
        live_href: format!("/console/live/{ns}/{encoded}"),
        state_href,
        key_href: view::key_href(&namespace, &key),
        audit_href: format!("/console/audit?namespace={ns}&key={encoded}"),
        error: None,
    };
    render(&page, StatusCode::OK)
}

/// `/console/verify/NS/KEY` (with `?request=ID`).
pub fn verify_href(namespace: &str, key: &str, request: Option<u64>) -> String {
    let path = format!(
        "/console/verify/{}/{}",
        encode_path(namespace).replace('/', "%2F"),
        encode_path(key)
    );
    match request {
        Some(id) => format!("{path}?request={id}"),
        None => path,
    }
}

async fn gather(
    console: &Console,
    user: &SignedIn,
    namespace: &str,
    key: &str,
    request: Option<u64>,
) -> Result<VerifyView, ClientError> {
    let info = inspect(user, namespace, key).await?;
    let k = KeyView::of(&info);
    let log = read_log(&user.client, namespace, key, info.revision).await?;
    let release = release_of(&log.events, request);
    let told = async {
        match &release {
            Some(release) => Some(told_of(console, user, namespace, key, release).await),
            None => None,
        }
    };
    let alerts = AlertsView::read(
        &console.alerts_http,
        console.config.alertmanager_url.as_deref(),
    );
    let (told, alerts) = tokio::join!(told, alerts);
    let events: Vec<&proto::Event> = log.events.iter().collect();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let chart = QueueChart::of(&events, log.complete, &k, now_ms);
    let rows = events.iter().rev().take(LOG_ROWS_SHOWN).rev();
    let key_alerts = alerts
        .of_key(namespace, key)
        .into_iter()
        .map(|a| AlertView {
            name: a.name.clone(),
            severity: a.severity.clone(),
            state: a.state.clone(),
            summary: a.summary.clone(),
            namespace: a.namespace.clone(),
            key: a.key.clone(),
            key_href: a.key_href.clone(),
            since: a.since.clone(),
        })
        .collect();
    Ok(VerifyView {
        held_by: k
            .holders
            .iter()
            .map(|h| {
                format!(
                    "{} on {} (pid {}), session {}, token {}",
                    h.name, h.host, h.pid, h.session_id, h.token
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        log: rows.map(|e| LogRow::of(e)).collect(),
        log_events: log.events.len(),
        log_from: log.from,
        log_complete: log.complete,
        chart,
        release_missing: request.filter(|_| release.is_none()),
        release,
        told,
        alerts,
        key_alerts,
        k,
    })
}

/// The key's events as the lock log keeps them, up to `through` (the inspection's revision).
struct LogRead {
    events: Vec<proto::Event>,
    from: u64,
    /// From the log's first revision, and nothing dropped here.
    complete: bool,
}

async fn read_log(
    client: &Client,
    namespace: &str,
    key: &str,
    through: u64,
) -> Result<LogRead, ClientError> {
    let mut read = LogRead {
        events: Vec::new(),
        from: 1,
        complete: true,
    };
    let mut kept = VecDeque::new();
    let mut watcher = client.watch(Some(namespace), key, 1);
    while watcher.resume_from() <= through {
        let page = match tokio::time::timeout(LOG_PAGE_WAIT, watcher.next_page()).await {
            // Nothing more about this key yet: read up to now.
            Err(_) => break,
            Ok(Ok(page)) => page,
            Ok(Err(ClientError::Compacted {
                oldest_available_revision,
                ..
            })) if read.from == 1 => {
                read.from = oldest_available_revision.max(1);
                read.complete = false;
                watcher = client.watch(Some(namespace), key, read.from);
                continue;
            }
            Ok(Err(error)) => return Err(error),
        };
        // The prefix also matches longer keys.
        for event in page.into_iter().filter(|e| e.key == key) {
            if event.revision > through {
                continue;
            }
            kept.push_back(event);
            if kept.len() > LOG_EVENTS_MAX {
                kept.pop_front();
                read.complete = false;
            }
        }
    }
    read.events = kept.into();
    Ok(read)
}

/// The force-release `request` (default: the newest) as the key's log recorded it.
fn release_of(events: &[proto::Event], request: Option<u64>) -> Option<ReleaseView> {
    use proto::event::Kind;
    let (event, released) = events.iter().rev().find_map(|e| match &e.kind {
        Some(Kind::ForceReleased(f)) if request.is_none_or(|id| id == f.force_release_id) => {
            Some((e, f))
        }
        _ => None,
    })?;
    let next = events
        .iter()
        .filter(|e| e.revision == event.revision)
        .find_map(|e| match &e.kind {
            Some(Kind::Granted(g)) => Some(format!(
                "{}session {} with token {}",
                identity_words(e.identity.as_ref())
                    .map(|w| format!("{w}, "))
                    .unwrap_or_default(),
                g.session_id,
                g.token
            )),
            _ => None,
        })
        .unwrap_or_default();
    Some(ReleaseView {
        request_id: released.force_release_id,
        session_id: released.session_id,
        token: released.token,
        revoked: released.session_revoked,
        revision: event.revision,
        time: utc(event.time_ms),
        time_ms: event.time_ms,
        who: identity_words(event.identity.as_ref()).unwrap_or_default(),
        next,
    })
}

fn identity_words(identity: Option<&proto::Identity>) -> Option<String> {
    identity.map(|i| format!("{} on {} (pid {})", i.name, i.host, i.pid))
}

fn cause_words(cause: i32) -> &'static str {
    match proto::ReleaseCause::try_from(cause) {
        Ok(proto::ReleaseCause::Released) => "released by its holder",
        Ok(proto::ReleaseCause::SessionClosed) => "its session closed",
        Ok(proto::ReleaseCause::SessionExpired) => "its session expired",
        Ok(proto::ReleaseCause::SessionRevoked) => "its session was revoked",
        Ok(proto::ReleaseCause::WaitExpired) => "its wait's deadline passed",
        Ok(proto::ReleaseCause::WaitCancelled) => "its wait was cancelled",
        _ => "cause unknown",
    }
}

impl LogRow {
    fn of(event: &proto::Event) -> LogRow {
        use proto::event::Kind;
        let (what, session_id) = match &event.kind {
            Some(Kind::Granted(g)) => (
                format!("granted, token {} ({})", g.token, view::mode_word(g.mode)),
                g.session_id,
            ),
            Some(Kind::Queued(q)) => (format!("queued at position {}", q.position), q.session_id),
            Some(Kind::Released(r)) => (
                format!("released token {}: {}", r.token, cause_words(r.cause)),
                r.session_id,
            ),
            Some(Kind::WaitRemoved(w)) => (
                format!("left the queue: {}", cause_words(w.cause)),
                w.session_id,
            ),
            Some(Kind::ForceReleased(f)) => (
                format!(
                    "force-released token {} by request {}{}",
                    f.token,
                    f.force_release_id,
                    if f.session_revoked {
                        ", session revoked"
                    } else {
                        ", session kept"
                    }
                ),
                f.session_id,
            ),
            Some(Kind::SemaphoreChanged(s)) => (
                format!(
                    "semaphore permits {} (were {})",
                    s.permits, s.previous_permits
                ),
                0,
            ),
            Some(Kind::ClassChanged(c)) => (format!("class {} changed", c.class), 0),
            None => ("unknown event".to_owned(), 0),
        };
        LogRow {
            revision: event.revision,
            time: utc(event.time_ms),
            what,
            session_id,
            who: identity_words(event.identity.as_ref()).unwrap_or_default(),
            principal: event
                .identity
                .as_ref()
                .map(|i| i.principal.clone())
                .unwrap_or_default(),
        }
    }
}

/// What the replicas recorded telling the released holder's session, and what will tell it
/// while nobody has.
async fn told_of(
    console: &Console,
    user: &SignedIn,
    namespace: &str,
    key: &str,
    release: &ReleaseView,
) -> ToldView {
    let credentials = &user.client.config().credentials;
    let mut asks = tokio::task::JoinSet::new();
    for (node_id, base) in &console.config.http_endpoints.all() {
        let mut request = console
            .http
            .get(format!("{base}/v1/sessions/{}/told", release.session_id))
            .timeout(TOLD_TIMEOUT);
        if let Some(bearer) = &credentials.bearer {
            request = request.bearer_auth(bearer);
        }
        if let Some(principal) = &credentials.principal {
            request = request.header(crate::auth::PRINCIPAL_METADATA, principal);
        }
        if let Some(roles) = &credentials.roles {
            request = request.header(crate::auth::ROLES_METADATA, roles);
        }
        let node_id = *node_id;
        asks.spawn(async move {
            let answer = async {
                let answer = request.send().await.map_err(|e| e.to_string())?;
                let status = answer.status();
                let text = answer.text().await.map_err(|e| e.to_string())?;
                if !status.is_success() {
                    return Err(format!("HTTP {status}: {text}"));
                }
                serde_json::from_str::<ToldJson>(&text).map_err(|e| e.to_string())
            };
            (node_id, answer.await)
        });
    }
    let mut rows = Vec::new();
    let mut not_asked = Vec::new();
    while let Some(joined) = asks.join_next().await {
        let Ok((node_id, answer)) = joined else {
            continue;
        };
        match answer {
            Ok(answer) => rows.extend(
                answer
                    .told
                    .into_iter()
                    .filter_map(|t| told_row(node_id, t, namespace, key, release)),
            ),
            Err(why) => not_asked.push(format!("replica {node_id}: {why}")),
        }
    }
    rows.sort_by_key(|r| (r.at_ms, r.replica));
    not_asked.sort();
    let pending = if !rows.is_empty() {
        String::new()
    } else if release.revoked {
        "Not yet told. Its session was revoked with the release: its client learns it at once if it holds a session stream subscribed to pushes (a Picket client does), else from its next keepalive answer (lost). A process that is paused or cut off learns nothing until it runs again and a keepalive is answered.".to_owned()
    } else {
        "Not yet told. Its session lives on: its client learns that this hold is gone at once if pushed on its session stream, else from its next keepalive answer (lost_holds). A process that does not use a Picket client, or is paused or cut off, learns nothing.".to_owned()
    };
    ToldView {
        rows,
        not_asked,
        pending,
    }
}

/// A telling about the released hold or the end of its session.
fn told_row(
    replica: u64,
    told: Told,
    namespace: &str,
    key: &str,
    release: &ReleaseView,
) -> Option<ToldRow> {
    let what = match &told.loss {
        Loss::HoldLost {
            namespace: ns,
            key: k,
            token,
        } if ns == namespace && k == key && *token == release.token => {
            format!("lost its hold (token {token})")
        }
        Loss::HoldLost { .. } => return None,
        Loss::SessionEnded => format!("its session {} ended", told.session_id),
    };
    let by = match told.by {
        Channel::Push => "pushed on its session stream",
        Channel::Keepalive => "a keepalive answer",
    };
    let after = if told.at_ms >= release.time_ms {
        format!(
            "{} after the release",
            duration(told.at_ms - release.time_ms)
        )
    } else {
        format!(
            "{} before the release's log time (the clocks differ)",
            duration(release.time_ms - told.at_ms)
        )
    };
    Some(ToldRow {
        replica,
        by,
        what,
        at: utc(told.at_ms),
        at_ms: told.at_ms,
        after,
    })
}

#[cfg(test)]
mod tests;
