//! Picket's alerts as Alertmanager has them (`[console] alertmanager_url`): read with its API v2
//! (`GET <url>/api/v2/alerts`, the active ones: firing, silenced or inhibited), bounded by
//! [`ALERTMANAGER_TIMEOUT`] so that a slow Alertmanager never holds a page. The overview lists
//! them; the verify page shows the one about its key. Not configured or not answering is said
//! in words: never shown as "no alerts".

use std::time::Duration;

use serde_json::Value;

use super::view::key_href;

/// The whole read of Alertmanager (connect, answer, body) at most.
pub const ALERTMANAGER_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer read (bytes); a larger one is refused as unreadable.
const ANSWER_BYTES_MAX: usize = 8 << 20;
/// Picket's alert rules all begin so (deploy/prometheus/picket-alerts.yml).
const PICKET_ALERT_PREFIX: &str = "Picket";

/// One of Picket's alerts.
pub struct AlertView {
    pub name: String,
    pub severity: String,
    /// `firing`, `firing (silenced)`, `firing (inhibited)` or `received, not yet processed`.
    pub state: String,
    pub summary: String,
    pub namespace: String,
    pub key: String,
    /// The key's console page (`""`: the alert names no key).
    pub key_href: String,
    /// When Alertmanager says it began, UTC.
    pub since: String,
}

/// What the console knows of the alerts.
pub struct AlertsView {
    /// `[console] alertmanager_url` is set.
    pub configured: bool,
    pub url: String,
    /// Why Alertmanager could not be read (`""`: it answered).
    pub error: String,
    /// Picket's active alerts, oldest first (only when it answered).
    pub alerts: Vec<AlertView>,
}

impl AlertsView {
    /// Reads the active alerts of `url` (`None`: not configured).
    pub async fn read(http: &reqwest::Client, url: Option<&str>) -> AlertsView {
        let Some(url) = url else {
            return AlertsView {
                configured: false,
                url: String::new(),
                error: String::new(),
                alerts: Vec::new(),
            };
        };
        let url = url.trim_end_matches('/').to_owned();
        match tokio::time::timeout(ALERTMANAGER_TIMEOUT, fetch(http, &url)).await {
            Ok(Ok(alerts)) => AlertsView {
                configured: true,
                url,
                error: String::new(),
                alerts,
            },
            Ok(Err(error)) => AlertsView::unreadable(url, error),
            Err(_) => AlertsView::unreadable(
                url,
                format!("no answer within {} s", ALERTMANAGER_TIMEOUT.as_secs()),
            ),
        }
    }

    fn unreadable(url: String, error: String) -> AlertsView {
        AlertsView {
            configured: true,
            url,
            error,
            alerts: Vec::new(),
        }
    }

    /// Alertmanager answered: `alerts` is what it has.
    pub fn answered(&self) -> bool {
        self.configured && self.error.is_empty()
    }

    /// The alerts naming `namespace` and `key`.
    pub fn of_key(&self, namespace: &str, key: &str) -> Vec<&AlertView> {
        let of = |a: &&AlertView| a.namespace == namespace && a.key == key;
        self.alerts.iter().filter(of).collect()
    }
}

async fn fetch(http: &reqwest::Client, url: &str) -> Result<Vec<AlertView>, String> {
    let answer = http
        .get(format!("{url}/api/v2/alerts"))
        .timeout(ALERTMANAGER_TIMEOUT)
        .send()
        .await
        .map_err(|e| format!("cannot reach it: {e}"))?;
    let status = answer.status();
    let body = answer
        .bytes()
        .await
        .map_err(|e| format!("its answer broke off: {e}"))?;
    if !status.is_success() {
        return Err(format!("it answered HTTP {status}"));
    }
    if body.len() > ANSWER_BYTES_MAX {
        return Err(format!(
            "its answer is larger than {ANSWER_BYTES_MAX} bytes"
        ));
    }
    let json: Value = serde_json::from_slice(&body)
        .map_err(|e| format!("its answer is not the API v2 alert list: {e}"))?;
    let Some(list) = json.as_array() else {
        return Err("its answer is not the API v2 alert list (not an array)".to_owned());
    };
    let mut alerts: Vec<AlertView> = list.iter().filter_map(alert_of).collect();
    alerts.sort_by(|a, b| (&a.since, &a.name, &a.key).cmp(&(&b.since, &b.name, &b.key)));
    Ok(alerts)
}

/// One alert of the API v2 list, if it is one of Picket's.
fn alert_of(alert: &Value) -> Option<AlertView> {
    let labels = &alert["labels"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let name = text(&labels["alertname"]);
    if !name.starts_with(PICKET_ALERT_PREFIX) {
        return None;
    }
    let status = &alert["status"];
    let listed = |field: &str| status[field].as_array().is_some_and(|a| !a.is_empty());
    let state = match status["state"].as_str() {
        Some("suppressed") if listed("silencedBy") => "firing (silenced)",
        Some("suppressed") => "firing (inhibited)",
        Some("unprocessed") => "received, not yet processed",
        _ => "firing",
    };
    let (namespace, key) = (text(&labels["namespace"]), text(&labels["key"]));
    Some(AlertView {
        key_href: if namespace.is_empty() || key.is_empty() {
            String::new()
        } else {
            key_href(&namespace, &key)
        },
        name,
        severity: text(&labels["severity"]),
        state: state.to_owned(),
        summary: text(&alert["annotations"]["summary"]),
        namespace,
        key,
        since: readable_time(&text(&alert["startsAt"])),
    })
}

/// `2026-12-02T00:10:11.123456789Z` as `2026-12-02T00:10:11Z` (Alertmanager's RFC 3339).
fn readable_time(rfc3339: &str) -> String {
    match rfc3339.split_once('.') {
        Some((seconds, _)) => format!("{seconds}Z"),
        None => rfc3339.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pickets_alerts_are_read_with_their_state_in_words() {
        let list = serde_json::json!([
            {"labels": {"alertname": "PicketHoldAboveClassMax", "namespace": "orders",
                        "key": "ledger/17", "severity": "page"},
             "annotations": {"summary": "Lock orders/ledger/17 has been held for 4m"},
             "startsAt": "2026-12-02T00:10:11.123456789Z",
             "status": {"state": "suppressed", "silencedBy": ["s1"], "inhibitedBy": []}},
            {"labels": {"alertname": "DiskFull"}, "status": {"state": "active"}},
            {"labels": {"alertname": "PicketClusterDown", "severity": "page"},
             "startsAt": "2026-12-02T00:11:00Z", "status": {"state": "active"}}
        ]);
        let alerts: Vec<AlertView> = list
            .as_array()
            .unwrap()
            .iter()
            .filter_map(alert_of)
            .collect();
        assert_eq!(alerts.len(), 2);
        assert_eq!(alerts[0].state, "firing (silenced)");
        assert_eq!(alerts[0].key_href, "/console/keys/orders/ledger/17");
        assert_eq!(alerts[0].since, "2026-12-02T00:10:11Z");
        assert_eq!(alerts[1].state, "firing");
        assert_eq!(alerts[1].key_href, "", "the cluster alert names no key");
    }

    #[tokio::test]
    async fn not_configured_and_unreachable_are_not_no_alerts() {
        let http = reqwest::Client::new();
        let none = AlertsView::read(&http, None).await;
        assert!(!none.configured && !none.answered());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("http://127.0.0.1:{port}/");
        let down = AlertsView::read(&http, Some(&url)).await;
        assert!(down.configured && !down.answered());
        assert_eq!(down.url, format!("http://127.0.0.1:{port}"));
        assert!(down.error.starts_with("cannot reach it"), "{}", down.error);
    }
}
