//! The audit review: `/console/audit` shows the audit trail a page at a time, filtered by
//! namespace, key and revision, and exports everything the filter matches as JSON or CSV
//! (`?format=json|csv`). It reads with `Admin.QueryAudit` as the signed-in person, and says each
//! record in the same words as `picketctl audit` ([`crate::audit_report`]).

use askama::Template;
use axum::extract::Query;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use picket_proto::proto;
use serde::Deserialize;

use super::{render, view, Refused, Viewer, Who};
use crate::audit_report;
use crate::wall_clock::utc;

/// Records per page on the audit page.
pub const AUDIT_PAGE: u32 = 200;
/// Records per `QueryAudit` call of an export.
const EXPORT_PAGE: u32 = 10_000;
/// The most records one export holds; a larger trail is exported in parts (the response's
/// `Picket-Audit-Next-From` header names where the next part starts).
pub const EXPORT_RECORDS_MAX: usize = 100_000;

#[derive(Deserialize, Default)]
pub(super) struct AuditQuery {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    from: String,
    #[serde(default)]
    format: String,
}

struct AuditRow {
    revision: u64,
    time: String,
    action: &'static str,
    namespace: String,
    key: String,
    /// The key page, for records about a lock key (not class or semaphore declarations).
    href: String,
    actor: String,
    detail: String,
}

#[derive(Template)]
#[template(path = "console/audit.html")]
struct AuditPage {
    who: Option<Who>,
    error: Option<Refused>,
    namespace: String,
    key: String,
    from: u64,
    rows: Vec<AuditRow>,
    compacted_through: u64,
    page: u32,
    next_href: String,
    json_href: String,
    csv_href: String,
}

enum Format {
    Html,
    Json,
    Csv,
}

pub(super) async fn audit_page(Viewer(user): Viewer, Query(query): Query<AuditQuery>) -> Response {
    let (namespace, key) = (query.namespace.trim(), query.key.trim());
    let mut page = AuditPage {
        who: Some(Who::of(&user)),
        error: None,
        namespace: namespace.to_owned(),
        key: key.to_owned(),
        from: 0,
        rows: Vec::new(),
        compacted_through: 0,
        page: AUDIT_PAGE,
        next_href: String::new(),
        json_href: String::new(),
        csv_href: String::new(),
    };
    let format = match query.format.as_str() {
        "" | "html" => Format::Html,
        "json" => Format::Json,
        "csv" => Format::Csv,
        other => {
            page.error = Some(Refused::console(
                "invalid_argument",
                format!("format {other:?} is not one of html, json, csv"),
            ));
            return render(&page, StatusCode::BAD_REQUEST);
        }
    };
    let from = match query.from.trim() {
        "" => 0,
        text => match text.parse::<u64>() {
            Ok(from) => from,
            Err(_) => {
                page.error = Some(Refused::console(
                    "invalid_argument",
                    format!("from revision {text:?} is not a whole number"),
                ));
                return render(&page, StatusCode::BAD_REQUEST);
            }
        },
    };
    page.from = from;
    let filter = filter_query(namespace, key, &from.to_string());
    let with_format = |f: &str| {
        let sep = if filter.is_empty() { '?' } else { '&' };
        format!("/console/audit{filter}{sep}format={f}")
    };
    page.json_href = with_format("json");
    page.csv_href = with_format("csv");
    let request = |from: u64, limit: u32| proto::QueryAuditRequest {
        namespace: (!namespace.is_empty()).then(|| namespace.to_owned()),
        key: (!key.is_empty()).then(|| key.to_owned()),
        revision_min: from,
        revision_max: None,
        limit,
        allow_stale: false,
    };
    match format {
        Format::Html => match user.client.query_audit(request(from, AUDIT_PAGE)).await {
            Ok(answer) => {
                page.compacted_through = answer.compacted_through;
                page.rows = answer.records.iter().map(row).collect();
                if answer.records.len() == AUDIT_PAGE as usize {
                    let next = answer.records.last().map_or(from, |r| r.revision + 1);
                    page.next_href = format!(
                        "/console/audit{}",
                        filter_query(namespace, key, &next.to_string())
                    );
                }
                render(&page, StatusCode::OK)
            }
            Err(error) => {
                page.error = Some(Refused::of(&error));
                render(&page, StatusCode::FORBIDDEN)
            }
        },
        Format::Json | Format::Csv => {
            let mut all = proto::QueryAuditResponse::default();
            let mut next_from = Some(from);
            while let Some(at) = next_from {
                if all.records.len() >= EXPORT_RECORDS_MAX {
                    break;
                }
                match user.client.query_audit(request(at, EXPORT_PAGE)).await {
                    Ok(answer) => {
                        all.compacted_through = all.compacted_through.max(answer.compacted_through);
                        let full = answer.records.len() == EXPORT_PAGE as usize;
                        next_from = full
                            .then(|| answer.records.last().map(|r| r.revision + 1))
                            .flatten();
                        all.records.extend(answer.records);
                    }
                    Err(error) => {
                        page.error = Some(Refused::of(&error));
                        return render(&page, StatusCode::FORBIDDEN);
                    }
                }
            }
            let truncated_at = (all.records.len() >= EXPORT_RECORDS_MAX).then(|| {
                all.records.truncate(EXPORT_RECORDS_MAX);
                all.records.last().map_or(from, |r| r.revision + 1)
            });
            export(&all, format, namespace, from, truncated_at)
        }
    }
}

fn row(r: &proto::AuditRecord) -> AuditRow {
    let about_a_lock = !matches!(
        proto::AuditAction::try_from(r.action),
        Ok(proto::AuditAction::ClassPut
            | proto::AuditAction::ClassRemoved
            | proto::AuditAction::SemaphoreSet
            | proto::AuditAction::MembershipChanged
            | proto::AuditAction::SnapshotSaved
            | proto::AuditAction::ClusterVersionSet)
    );
    AuditRow {
        revision: r.revision,
        time: utc(r.time_ms),
        action: audit_report::action_words(r.action),
        namespace: r.namespace.clone(),
        key: r.key.clone(),
        href: if about_a_lock && !r.key.is_empty() {
            view::key_href(&r.namespace, &r.key)
        } else {
            String::new()
        },
        actor: audit_report::actor_words(r),
        detail: audit_report::detail_words(r),
    }
}

/// `?namespace=..&key=..&from=..` with the empty ones left out ("" when all are).
fn filter_query(namespace: &str, key: &str, from: &str) -> String {
    let parts: Vec<String> = [("namespace", namespace), ("key", key), ("from", from)]
        .into_iter()
        .filter(|(_, v)| !v.trim().is_empty() && *v != "0")
        .map(|(name, v)| format!("{name}={}", view::encode_path(v.trim())))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

fn export(
    all: &proto::QueryAuditResponse,
    format: Format,
    namespace: &str,
    from: u64,
    truncated_at: Option<u64>,
) -> Response {
    let scope = if namespace.is_empty() {
        "all"
    } else {
        namespace
    };
    let (body, content_type, extension) = match format {
        Format::Json => {
            let mut json = audit_report::response_json(all);
            json["next_from"] = serde_json::json!(truncated_at);
            (
                serde_json::to_string_pretty(&json).expect("JSON values serialize"),
                "application/json",
                "json",
            )
        }
        _ => (
            audit_report::csv(&all.records),
            "text/csv; charset=utf-8",
            "csv",
        ),
    };
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // The namespace is [a-z0-9-] (checked by the server before it answered), so it is safe in
    // a header; anything else would have been refused above.
    let disposition =
        format!("attachment; filename=\"picket-audit-{scope}-from-{from}.{extension}\"");
    if let Ok(value) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    if let Some(next) = truncated_at {
        headers.insert("picket-audit-next-from", HeaderValue::from(next));
    }
    response
}
