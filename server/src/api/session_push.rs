//! Pushes on the `Session` stream (docs/api.md, "Pushes"): a stream that sent `subscribe` is
//! told at once, in a `SessionEvent` with seq 0, when a session it carries loses a hold to a
//! force-release without revocation or ends (closed, expired, revoked), instead of with that
//! session's next keepalive answer (which still says the same).
//!
//! The facts come from the replica's lock log, the one `Watch` reads. One task per server
//! ([`LogFeed`], started by the first stream that subscribes) follows it and hands each page to
//! every subscribed stream's push task over a bounded broadcast; the push task picks the events
//! about the sessions its stream carries ([`Carried`]: those it had a keepalive or an acquire
//! answered without error for, so the caller proved the session's secret) and queues them on
//! the stream's bounded outgoing channel without waiting. A push that finds that channel full,
//! and a page a push task fell too far behind to read, are dropped and counted
//! ([`LogFeed::pushes_dropped`]): the keepalive answers carry the same facts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use picket_core::locks::{
    Event, EventKind, LostHold, ReleaseCause, Revision, WatchError, WatchFilter,
};
use picket_proto::proto::{self, session_event, session_response};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{broadcast, mpsc, watch};
use tonic::Status;

use crate::api::told::ToldLog;
use crate::node::driver::{DriverHandle, Request as DriverRequest};
use crate::shutdown::stopped;

/// Pages of the lock log buffered for the push tasks; a task further behind skips the oldest.
const FEED_PAGES_BUFFERED: usize = 64;
/// Events per page the feed reads (about: pages end at revision boundaries).
const FEED_PAGE_EVENTS: usize = 1_000;
/// Sessions one stream carries at most; a session beyond gets no pushes on that stream (its
/// keepalive answers still tell it everything).
pub(crate) const SESSIONS_CARRIED_MAX: usize = 4_096;

type Page = Arc<[Event]>;
type Outgoing = mpsc::Sender<Result<proto::SessionResponse, Status>>;

/// The lock log, followed once per server for every subscribed `Session` stream.
#[derive(Clone, Debug, Default)]
pub struct LogFeed(Arc<Feed>);

#[derive(Debug, Default)]
struct Feed {
    /// Set (and the following task started) by the first subscriber.
    pages: OnceLock<broadcast::Sender<Page>>,
    /// Pushes dropped (a stream's buffer full) and pages skipped (a push task behind).
    dropped: AtomicU64,
}

impl crate::metrics::CounterSource for LogFeed {
    fn counters(&self) -> Vec<crate::metrics::SourcedCounter> {
        vec![crate::metrics::SourcedCounter {
            name: "picket_session_pushes_dropped",
            help: "Session-stream pushes not sent (a stream's buffer full) plus lock-log pages a \
                   stream's push task fell too far behind to read; the keepalive answers carry \
                   the same facts",
            label: None,
            value: self.pushes_dropped(),
        }]
    }
}

impl LogFeed {
    /// Pushes not sent because a stream's outgoing buffer was full, plus log pages a stream's
    /// push task fell too far behind to read, since the server started.
    pub fn pushes_dropped(&self) -> u64 {
        self.0.dropped.load(Ordering::Relaxed)
    }

    fn count_dropped(&self, n: u64) {
        self.0.dropped.fetch_add(n, Ordering::Relaxed);
    }

    fn subscribe(
        &self,
        driver: &DriverHandle,
        shutdown: &watch::Receiver<bool>,
    ) -> broadcast::Receiver<Page> {
        self.0
            .pages
            .get_or_init(|| {
                let (pages, _) = broadcast::channel(FEED_PAGES_BUFFERED);
                tokio::spawn(follow(driver.clone(), pages.clone(), shutdown.clone()));
                pages
            })
            .subscribe()
    }

    /// Starts the push task of a stream that sent `subscribe`: it runs until the stream's
    /// reader is gone or the server stops.
    pub(crate) fn start_pushes(
        &self,
        driver: &DriverHandle,
        shutdown: &watch::Receiver<bool>,
        told: &ToldLog,
        carried: Arc<Carried>,
        tx: Outgoing,
    ) {
        let pages = self.subscribe(driver, shutdown);
        let told = told.clone();
        tokio::spawn(push(
            self.clone(),
            pages,
            told,
            carried,
            tx,
            shutdown.clone(),
        ));
    }
}

/// Reads the lock log from the revision applied when it starts, one page per read, and hands
/// every non-empty page to the push tasks; while there are none it reads nothing.
async fn follow(
    driver: DriverHandle,
    pages: broadcast::Sender<Page>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut applied = driver.applied();
    let mut from = Revision(applied.borrow_and_update().0 + 1);
    loop {
        if pages.receiver_count() == 0 {
            // Nobody to tell: what happened meanwhile is in the keepalive answers.
            from = Revision(applied.borrow_and_update().0 + 1);
        } else {
            let page = driver
                .ask(|reply| DriverRequest::Watch {
                    from,
                    filter: WatchFilter::default(),
                    limit: FEED_PAGE_EVENTS,
                    reply,
                })
                .await;
            match page {
                Ok(Ok(page)) => {
                    from = page.resume_from;
                    if !page.events.is_empty() {
                        // No receiver left since the check: nothing to do.
                        let _ = pages.send(page.events.into());
                        continue;
                    }
                }
                // Dropped from the retained history before this task read it: those pushes are
                // lost (the keepalive answers still tell).
                Ok(Err(WatchError::Compacted {
                    oldest_available, ..
                })) => {
                    from = oldest_available;
                    continue;
                }
                // The driver is gone: the server is stopping.
                Err(_) => return,
            }
        }
        tokio::select! {
            biased;
            () = stopped(&mut shutdown) => return,
            changed = applied.changed() => if changed.is_err() { return },
        }
    }
}

/// Picks the pushes for one stream out of the feed's pages and queues them without waiting;
/// each one queued is noted in `told`.
async fn push(
    feed: LogFeed,
    mut pages: broadcast::Receiver<Page>,
    told: ToldLog,
    carried: Arc<Carried>,
    tx: Outgoing,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let page = tokio::select! {
            biased;
            () = stopped(&mut shutdown) => return,
            () = tx.closed() => return,
            page = pages.recv() => page,
        };
        let page = match page {
            Ok(page) => page,
            Err(RecvError::Lagged(skipped)) => {
                feed.count_dropped(skipped);
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        for event in carried.pushes(&page) {
            let noted = event.clone();
            let message = proto::SessionResponse {
                seq: 0,
                response: Some(session_response::Response::Event(event)),
            };
            match tx.try_send(Ok(message)) {
                Ok(()) => told.record_push(&noted),
                Err(TrySendError::Full(_)) => feed.count_dropped(1),
                Err(TrySendError::Closed(_)) => return,
            }
        }
    }
}

/// The sessions a stream carries: those it had a keepalive or an acquire answered without
/// error for (at most [`SESSIONS_CARRIED_MAX`]); a session leaves when its end is seen.
#[derive(Debug, Default)]
pub(crate) struct Carried(Mutex<BTreeSet<u64>>);

impl Carried {
    fn sessions(&self) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stream's caller proved `session_id`'s secret.
    pub(crate) fn carry(&self, session_id: u64) {
        let mut sessions = self.sessions();
        if sessions.len() < SESSIONS_CARRIED_MAX {
            sessions.insert(session_id);
        }
    }

    /// `session_id` is gone (a keepalive answer said so).
    pub(crate) fn forget(&self, session_id: u64) {
        self.sessions().remove(&session_id);
    }

    /// The pushes `events` make for the carried sessions, in log order: each hold lost to a
    /// force-release without revocation, and each session's end (once; it is then forgotten).
    fn pushes(&self, events: &[Event]) -> Vec<proto::SessionEvent> {
        // The request of a revoking force-release: its event may come after the session's
        // other holds and waits ended in the same revision.
        let revoked_by: BTreeMap<(u64, Revision), u64> = events
            .iter()
            .filter_map(|event| match event.kind {
                EventKind::ForceReleased {
                    session,
                    request,
                    session_revoked: true,
                    ..
                } => Some(((session.0, event.revision), request.0)),
                _ => None,
            })
            .collect();
        let mut sessions = self.sessions();
        let mut pushes = Vec::new();
        for event in events {
            let Some((session_id, kind)) = push_of(event, &revoked_by) else {
                continue;
            };
            if !sessions.contains(&session_id) {
                continue;
            }
            if matches!(kind, session_event::Kind::Ended(_)) {
                sessions.remove(&session_id);
            }
            pushes.push(proto::SessionEvent {
                session_id,
                revision: event.revision.0,
                kind: Some(kind),
            });
        }
        pushes
    }
}

/// The push `event` makes for its session, if any.
fn push_of(
    event: &Event,
    revoked_by: &BTreeMap<(u64, Revision), u64>,
) -> Option<(u64, session_event::Kind)> {
    let (session, cause) = match event.kind {
        EventKind::ForceReleased {
            session,
            token,
            request,
            session_revoked: false,
        } => {
            let hold = LostHold {
                namespace: event.namespace.clone(),
                key: event.key.clone(),
                token,
                revision: event.revision,
                request,
            };
            return Some((session.0, session_event::Kind::HoldLost(hold.into())));
        }
        EventKind::ForceReleased { session, .. } => (session, ReleaseCause::SessionRevoked),
        EventKind::Released { session, cause, .. } | EventKind::WaitRemoved { session, cause } => {
            (session, cause)
        }
        _ => return None,
    };
    if !matches!(
        cause,
        ReleaseCause::SessionClosed | ReleaseCause::SessionExpired | ReleaseCause::SessionRevoked
    ) {
        return None;
    }
    let force_release_id = match cause {
        ReleaseCause::SessionRevoked => revoked_by
            .get(&(session.0, event.revision))
            .copied()
            .unwrap_or(0),
        _ => 0,
    };
    let ended = session_event::SessionEnded {
        cause: proto::ReleaseCause::from(cause).into(),
        force_release_id,
    };
    Some((session.0, session_event::Kind::Ended(ended)))
}
