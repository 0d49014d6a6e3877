//! The queue-depth chart of the verify page, drawn by the server as SVG: a step line of the
//! key's queue depth over its lock log's revisions, with a table beside it.

use super::*;

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

/// Chart geometry (SVG user units).
pub(super) const CHART_WIDTH: u32 = 640;
pub(super) const CHART_HEIGHT: u32 = 200;
pub(super) const CHART_LEFT: u32 = 40;
pub(super) const CHART_TOP: u32 = 10;
pub(super) const CHART_BOTTOM: u32 = 30;

impl QueueChart {
    /// The queue's depth after each revision of `events` (oldest first): a `queued` event adds
    /// its session to the waiters, a grant or a removed wait takes it out. The last point is
    /// the key's queue as `Admin.Inspect` answers it now, `k`.
    pub(super) fn of(
        events: &[&proto::Event],
        complete: bool,
        k: &KeyView,
        now_ms: u64,
    ) -> QueueChart {
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
