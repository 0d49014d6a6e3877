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
use picket_net::client::{Client, ClientError};
use picket_net::proto;
use serde::Deserialize;

use super::alerts::{AlertView, AlertsView};
use super::signin::SignedIn;
use super::view::{self, encode_path, KeyView};
use super::{inspect, message, render, Console, Refused, Viewer, Who};
use crate::api::http::told::ToldJson;
use crate::api::told::{Channel, Loss, Told};
use crate::wall_clock::{duration, utc};

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

/// The queue's depth after one revision of the key's log.
pub struct QueuePoint {
    pub revision: u64,
    /// Log time (ms since the Unix epoch) of the revision; the chart's x.
    pub time_ms: u64,
    pub time: String,
    pub depth: u64,
    pub what: String,
}

/// The chart, drawn by the server: a step line of the depth over the points, in order.
pub struct QueueChart {
    pub points: Vec<QueuePoint>,
    pub depth_max: u64,
    /// SVG polyline points (`x,y x,y ...`).
    pub line: String,
    /// Circles, one per point: (x, y, label).
    pub dots: Vec<(u32, u32, String)>,
    /// Why the count may be off (`""`: it is the key's queue as the log tells it).
    pub note: String,
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

/// Chart geometry (SVG user units).
const CHART_WIDTH: u32 = 640;
const CHART_HEIGHT: u32 = 200;
const CHART_LEFT: u32 = 40;
const CHART_TOP: u32 = 10;
const CHART_BOTTOM: u32 = 30;

impl QueueChart {
    /// The queue's depth after each revision of `events` (oldest first): a `queued` event adds
    /// its session to the waiters, a grant or a removed wait takes it out. The last point is
    /// the key's queue as `Admin.Inspect` answers it now, `k`.
    fn of(events: &[&proto::Event], complete: bool, k: &KeyView, now_ms: u64) -> QueueChart {
        use proto::event::Kind;
        let mut waiting = BTreeSet::new();
        let mut points: Vec<QueuePoint> = Vec::new();
        for event in events {
            let what = match &event.kind {
                Some(Kind::Queued(q)) => {
                    waiting.insert(q.session_id);
                    format!("session {} queued", q.session_id)
                }
                Some(Kind::Granted(g)) => {
                    waiting.remove(&g.session_id);
                    format!("session {} granted", g.session_id)
                }
                Some(Kind::WaitRemoved(w)) => {
                    // A wait that began before the events read: it was waiting all along.
                    if !waiting.remove(&w.session_id) && !complete {
                        for point in &mut points {
                            point.depth += 1;
                        }
                    }
                    format!("session {} left the queue", w.session_id)
                }
                Some(Kind::Released(r)) => format!("session {} released", r.session_id),
                Some(Kind::ForceReleased(f)) => {
                    format!("session {} force-released", f.session_id)
                }
                _ => continue,
            };
            let depth = waiting.len() as u64;
            match points.last_mut() {
                Some(last) if last.revision == event.revision => {
                    last.depth = depth;
                    last.what.push_str("; ");
                    last.what.push_str(&what);
                }
                _ => points.push(QueuePoint {
                    revision: event.revision,
                    time_ms: event.time_ms,
                    time: utc(event.time_ms),
                    depth,
                    what,
                }),
            }
        }
        let counted = points.last().map_or(0, |p| p.depth);
        let note = if counted != k.queue_depth && !points.is_empty() {
            format!(
                "The log's count ({counted}) differs from the queue now ({}): the events read do not reach back to every waiter's arrival.",
                k.queue_depth
            )
        } else if !complete {
            "The log read starts after the key's first events (older ones are compacted or beyond the events kept here): waits that began earlier are counted from their end.".to_owned()
        } else {
            String::new()
        };
        let last_ms = points.last().map_or(0, |p| p.time_ms);
        points.push(QueuePoint {
            revision: k.revision,
            time_ms: now_ms.max(last_ms),
            time: "now".to_owned(),
            depth: k.queue_depth,
            what: "the key as Admin.Inspect reads it now".to_owned(),
        });
        let skip = points.len().saturating_sub(CHART_POINTS_MAX);
        let points: Vec<QueuePoint> = points.into_iter().skip(skip).collect();
        let depth_max = points.iter().map(|p| p.depth).max().unwrap_or(0).max(1);
        let (line, dots) = geometry(&points, depth_max);
        QueueChart {
            points,
            depth_max,
            line,
            dots,
            note,
        }
    }

    pub fn width(&self) -> u32 {
        CHART_WIDTH
    }

    pub fn height(&self) -> u32 {
        CHART_HEIGHT
    }

    /// The y of depth 0 and of `depth_max`, and the x of the first and last points.
    pub fn axes(&self) -> (u32, u32, u32, u32) {
        (
            CHART_HEIGHT - CHART_BOTTOM,
            CHART_TOP,
            CHART_LEFT,
            CHART_WIDTH - 10,
        )
    }
}

fn geometry(points: &[QueuePoint], depth_max: u64) -> (String, Vec<(u32, u32, String)>) {
    let plot_width = CHART_WIDTH - CHART_LEFT - 10;
    let plot_height = CHART_HEIGHT - CHART_TOP - CHART_BOTTOM;
    // x is log time, so three stuck minutes look wider than six seconds; points all at one
    // time fall back to even spacing.
    let first_ms = points.first().map_or(0, |p| p.time_ms);
    let span_ms = points
        .last()
        .map_or(0, |p| p.time_ms)
        .saturating_sub(first_ms);
    let steps = u64::try_from(points.len().saturating_sub(1).max(1)).unwrap_or(u64::MAX);
    let x = |i: usize| {
        let at = (u64::from(plot_width) * points[i].time_ms.saturating_sub(first_ms))
            .checked_div(span_ms)
            .unwrap_or_else(|| u64::from(plot_width) * u64::try_from(i).unwrap_or(0) / steps);
        CHART_LEFT + u32::try_from(at).unwrap_or(plot_width)
    };
    let y = |depth: u64| {
        let up = u64::from(plot_height) * depth.min(depth_max) / depth_max;
        CHART_TOP + plot_height - u32::try_from(up).unwrap_or(0)
    };
    let mut line = Vec::new();
    let mut dots = Vec::new();
    for (i, point) in points.iter().enumerate() {
        if i > 0 {
            line.push(format!("{},{}", x(i), y(points[i - 1].depth)));
        }
        line.push(format!("{},{}", x(i), y(point.depth)));
        let label = format!(
            "{}, revision {}: {} waiting",
            point.time, point.revision, point.depth
        );
        dots.push((x(i), y(point.depth), label));
    }
    (line.join(" "), dots)
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
mod tests {
    use super::*;

    fn event(revision: u64, kind: proto::event::Kind) -> proto::Event {
        proto::Event {
            revision,
            time_ms: revision * 1_000,
            namespace: "orders".into(),
            key: "ledger/17".into(),
            identity: None,
            kind: Some(kind),
        }
    }

    fn key_now(revision: u64, queue_depth: u64) -> KeyView {
        KeyView::of(&proto::KeyInfo {
            revision,
            queue_depth,
            ..Default::default()
        })
    }

    #[test]
    fn the_queue_drains_as_the_log_grants_its_waiters() {
        use proto::event::Kind;
        let granted = |session_id, token| {
            Kind::Granted(proto::event::Granted {
                session_id,
                token,
                ..Default::default()
            })
        };
        let queued = |session_id, position| {
            Kind::Queued(proto::event::Queued {
                session_id,
                position,
            })
        };
        let events = [
            event(3, granted(1, 3)),
            event(4, queued(2, 1)),
            event(5, queued(3, 2)),
            event(
                6,
                Kind::ForceReleased(proto::event::ForceReleased {
                    session_id: 1,
                    token: 3,
                    force_release_id: 9,
                    session_revoked: true,
                }),
            ),
            event(6, granted(2, 6)),
            event(
                7,
                Kind::Released(proto::event::Released {
                    session_id: 2,
                    token: 6,
                    cause: proto::ReleaseCause::Released.into(),
                }),
            ),
            event(7, granted(3, 7)),
        ];
        let refs: Vec<&proto::Event> = events.iter().collect();
        let chart = QueueChart::of(&refs, true, &key_now(8, 0), 8_000);
        let depths: Vec<(u64, u64)> = chart.points.iter().map(|p| (p.revision, p.depth)).collect();
        assert_eq!(depths, [(3, 0), (4, 1), (5, 2), (6, 1), (7, 0), (8, 0)]);
        assert_eq!(chart.note, "");
        let release = release_of(&events, None).unwrap();
        assert_eq!(
            (release.request_id, release.token, release.revision),
            (9, 3, 6)
        );
        assert_eq!(release.next, "session 2 with token 6");
        assert!(release_of(&events, Some(8)).is_none());
        // A log that misses a waiter's arrival says so instead of drawing a false count.
        let chart = QueueChart::of(&refs[4..], true, &key_now(8, 1), 8_000);
        assert!(
            chart.note.contains("differs from the queue now (1)"),
            "{}",
            chart.note
        );
    }

    /// The x-axis is log time: three stuck minutes look wider than six seconds.
    #[test]
    fn the_chart_plots_the_queue_over_time_not_over_revisions() {
        use proto::event::Kind;
        let queued = |session_id| {
            Kind::Queued(proto::event::Queued {
                session_id,
                position: 1,
            })
        };
        let mut events = [
            event(3, queued(1)),
            event(4, queued(2)),
            event(5, queued(3)),
        ];
        events[0].time_ms = 0;
        events[1].time_ms = 6_000; // six seconds later
        events[2].time_ms = 186_000; // three minutes after that
        let refs: Vec<&proto::Event> = events.iter().collect();
        let chart = QueueChart::of(&refs, true, &key_now(6, 3), 186_000);
        let xs: Vec<u32> = chart.dots.iter().map(|(x, _, _)| *x).collect();
        assert_eq!(xs.len(), 4, "three events and now");
        let (first, second, third) = (xs[0], xs[1], xs[2]);
        assert!(
            (third - second) > 20 * (second - first),
            "3 minutes drawn wider than 6 s: {xs:?}"
        );
        assert_eq!(first, CHART_LEFT);
        assert_eq!(xs[3], CHART_WIDTH - 10, "now at the right edge");
    }

    #[test]
    fn a_telling_counts_only_for_the_released_hold_or_the_sessions_end() {
        let release = ReleaseView {
            request_id: 9,
            session_id: 1,
            token: 3,
            revoked: false,
            revision: 6,
            time: String::new(),
            time_ms: 6_000,
            who: String::new(),
            next: String::new(),
        };
        let told = |loss, at_ms| Told {
            session_id: 1,
            loss,
            by: Channel::Keepalive,
            at_ms,
            revision: None,
        };
        let hold = |token| Loss::HoldLost {
            namespace: "orders".into(),
            key: "ledger/17".into(),
            token,
        };
        let row = told_row(2, told(hold(3), 7_500), "orders", "ledger/17", &release).unwrap();
        assert_eq!(row.what, "lost its hold (token 3)");
        assert_eq!(row.after, "1 s after the release");
        assert_eq!(row.by, "a keepalive answer");
        assert!(told_row(2, told(hold(4), 7_500), "orders", "ledger/17", &release).is_none());
        let ended = told_row(
            1,
            told(Loss::SessionEnded, 5_000),
            "orders",
            "ledger/17",
            &release,
        );
        assert!(ended.unwrap().after.contains("clocks differ"));
    }
}
