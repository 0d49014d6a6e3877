//! The overview page: stuck holds, the longest hold per namespace, pending requests, the replicas.

use super::*;

pub(super) struct ReplicaView {
    pub(super) node_id: u64,
    pub(super) url: String,
    pub(super) role: String,
    pub(super) ready: bool,
    pub(super) detail: String,
}

pub(super) struct NamespaceView {
    pub(super) namespace: String,
    pub(super) key: String,
    pub(super) href: String,
    pub(super) holder: String,
    pub(super) held_for: String,
    pub(super) threshold: String,
    pub(super) over: String,
    pub(super) queue_depth: u64,
    pub(super) kind: &'static str,
}

#[derive(Template)]
#[template(path = "console/overview.html")]
pub(super) struct OverviewPage {
    pub(super) who: Option<Who>,
    pub(super) revision: u64,
    /// Every hold over its class's max expected hold, furthest over first: the ones that page.
    pub(super) overdue: Vec<NamespaceView>,
    pub(super) namespaces: Vec<NamespaceView>,
    pub(super) pending: Vec<PendingView>,
    pub(super) replicas: Vec<ReplicaView>,
    pub(super) leader: String,
    pub(super) alerts: alerts::AlertsView,
    pub(super) error: Option<Refused>,
}

pub(super) fn unreachable_replica(node_id: u64, base: &str, why: &str) -> ReplicaView {
    ReplicaView {
        node_id,
        url: base.to_owned(),
        role: "unreachable".to_owned(),
        ready: false,
        detail: why.to_owned(),
    }
}

pub(super) async fn overview(State(console): State<Console>, Viewer(user): Viewer) -> Response {
    let alertmanager = console.config.alertmanager_url.as_deref();
    let ((replicas, leader), alerts) = tokio::join!(
        console.replicas(),
        alerts::AlertsView::read(&console.alerts_http, alertmanager)
    );
    let mut page = OverviewPage {
        who: Some(Who::of(&user)),
        revision: 0,
        overdue: Vec::new(),
        namespaces: Vec::new(),
        pending: Vec::new(),
        replicas,
        leader,
        alerts,
        error: None,
    };
    let longest = user
        .client
        .longest_holds(proto::LongestHoldsRequest { allow_stale: false })
        .await;
    match longest {
        Ok(answer) => {
            page.revision = answer.revision;
            for hold in &answer.overdue {
                page.overdue.push(hold_row(&user, hold).await);
            }
            for hold in &answer.holds {
                page.namespaces.push(hold_row(&user, hold).await);
            }
        }
        Err(error) => page.error = Some(Refused::of(&error)),
    }
    if let Ok(listed) = user
        .client
        .list_force_releases(proto::ListForceReleasesRequest { allow_stale: false })
        .await
    {
        page.pending = listed.requests.iter().map(PendingView::of).collect();
    }
    render(&page, StatusCode::OK)
}

/// One row of the overview's hold tables, with the key's class kind and queue from its
/// inspection.
pub(super) async fn hold_row(user: &SignedIn, hold: &proto::HoldInfo) -> NamespaceView {
    let inspected = inspect(user, &hold.namespace, &hold.key).await.ok();
    let holder = view::HolderView::of(hold);
    NamespaceView {
        namespace: hold.namespace.clone(),
        key: hold.key.clone(),
        href: key_href(&hold.namespace, &hold.key),
        holder: format!("{} on {} (pid {})", holder.name, holder.host, holder.pid),
        held_for: holder.held_for,
        threshold: ClassView::threshold_words(hold.hold_ms_max_expected),
        over: holder.over,
        queue_depth: inspected.as_ref().map_or(0, |k| k.queue_depth),
        kind: view::kind_word(
            inspected
                .as_ref()
                .and_then(|k| k.class.as_ref())
                .is_some_and(|c| c.fenced),
        ),
    }
}
