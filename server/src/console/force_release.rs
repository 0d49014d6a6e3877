//! The force-release pages: the request, the second person's approval page, approve and deny.

use super::*;

#[derive(Template)]
#[template(path = "console/approve.html")]
pub(super) struct ApprovalPage {
    pub(super) who: Option<Who>,
    pub(super) r: PendingView,
    pub(super) now: Option<KeyView>,
    pub(super) own_request: bool,
    pub(super) error: Option<Refused>,
}

#[derive(Deserialize)]
pub(super) struct RequestFields {
    #[serde(default)]
    pub(super) csrf: String,
    #[serde(default)]
    pub(super) token: String,
    #[serde(default)]
    pub(super) session: String,
    #[serde(default)]
    pub(super) reason: String,
    #[serde(default)]
    pub(super) incident: String,
    /// A checkbox: present when on.
    pub(super) revoke: Option<String>,
    /// Advisory checklist: `yes`, `no` or `unknown`.
    #[serde(default)]
    pub(super) stopped: String,
    /// Why the release is still right when the answers say a double run is unsafe.
    #[serde(default)]
    pub(super) statement: String,
    #[serde(default)]
    pub(super) double_run: String,
}

/// The reason as recorded: the operator's words, the incident id and, for an advisory lock, the
/// checklist's answers, so the audit keeps what the requester knew.
/// The reason as recorded: as typed, and the incident id. The checklist travels as its own
/// fields (`proto::ForceReleaseChecklist`), not in the reason.
pub(super) fn recorded_reason(fields: &RequestFields) -> String {
    let mut reason = fields.reason.trim().to_owned();
    if !fields.incident.trim().is_empty() {
        reason.push_str(&format!(" [incident {}]", fields.incident.trim()));
    }
    reason
}

/// The form's checklist answer (`yes`, `no`, `unknown`; anything else: not answered).
pub(super) fn answer_of(text: &str) -> i32 {
    (match text {
        "yes" => proto::ChecklistAnswer::Yes,
        "no" => proto::ChecklistAnswer::No,
        "unknown" => proto::ChecklistAnswer::Unknown,
        _ => proto::ChecklistAnswer::Unspecified,
    }) as i32
}

pub(super) async fn request(
    State(console): State<Console>,
    headers: HeaderMap,
    Path((namespace, key)): Path<(String, String)>,
    Form(fields): Form<RequestFields>,
) -> Response {
    let user = match signed_in_post(&console, &headers, &fields.csrf) {
        Ok(user) => user,
        Err(refused) => return *refused,
    };
    let info = match inspect(&user, &namespace, &key).await {
        Ok(info) => info,
        Err(error) => {
            return message(
                Some(Who::of(&user)),
                Refused::status(&error),
                "Not requested",
                Some(Refused::of(&error)),
                vec![],
            )
        }
    };
    let k = KeyView::of(&info);
    let form = RequestForm {
        token: fields.token.clone(),
        session: fields.session.clone(),
        reason: fields.reason.clone(),
        incident: fields.incident.clone(),
        revoke: fields.revoke.is_some(),
        stopped: fields.stopped.clone(),
        double_run: fields.double_run.clone(),
        statement: fields.statement.clone(),
    };
    let page = |k: KeyView, form: RequestForm, error: Refused, status: StatusCode| {
        render(&key_page_of(&user, k, form, Some(error)), status)
    };
    let Ok(token) = fields.token.trim().parse::<u64>() else {
        let refusal = Refused::console(
            "bad_token",
            "the token is the number the holder card shows (the hold you mean): nothing was requested",
        );
        return page(k, form, refusal, StatusCode::BAD_REQUEST);
    };
    let session = match fields.session.trim() {
        "" => 0,
        text => match text.parse::<u64>() {
            Ok(session) => session,
            Err(_) => {
                let refusal = Refused::console(
                    "bad_session",
                    "the session is the holder's session id, a number: nothing was requested",
                );
                return page(k, form, refusal, StatusCode::BAD_REQUEST);
            }
        },
    };
    let fenced = k.class.fenced;
    let answered = |a: &str| matches!(a, "yes" | "no" | "unknown");
    let checklist_answered = answered(&fields.stopped) && answered(&fields.double_run);
    if !fenced && !checklist_answered {
        let refusal = Refused::console(
            "checklist_unanswered",
            "this lock is advisory: answer both questions of the checklist (they are recorded with the request): nothing was requested",
        );
        return page(k, form, refusal, StatusCode::BAD_REQUEST);
    }
    let reason = recorded_reason(&fields);
    if fields.reason.trim().is_empty() || reason.len() > REASON_LEN_MAX {
        let refusal = Refused::console(
            "bad_reason",
            format!("a reason is required, and with the incident and checklist at most {REASON_LEN_MAX} bytes: nothing was requested"),
        );
        return page(k, form, refusal, StatusCode::BAD_REQUEST);
    }
    let requested = user
        .client
        .request_force_release(proto::RequestForceReleaseRequest {
            namespace: namespace.clone(),
            key: key.clone(),
            expected_token: token,
            reason,
            revoke_session: fields.revoke.is_some(),
            holder_session_id: session,
            checklist: Some(proto::ForceReleaseChecklist {
                holder_stopped: answer_of(&fields.stopped),
                double_run_acceptable: answer_of(&fields.double_run),
                statement: fields.statement.trim().to_owned(),
            })
            .filter(|c| {
                c.holder_stopped != 0 || c.double_run_acceptable != 0 || !c.statement.is_empty()
            }),
        })
        .await;
    match requested {
        Ok(answer) => Redirect::to(&format!(
            "/console/force-releases/{}",
            answer.force_release_id
        ))
        .into_response(),
        Err(error) => page(k, form, Refused::of(&error), Refused::status(&error)),
    }
}

/// The pending request `id`, if it is still pending.
pub(super) async fn pending(
    user: &SignedIn,
    id: u64,
) -> Result<Option<proto::ForceReleaseInfo>, ClientError> {
    let listed = user
        .client
        .list_force_releases(proto::ListForceReleasesRequest { allow_stale: false })
        .await?;
    Ok(listed.requests.into_iter().find(|r| r.id == id))
}

/// Audit records read after a request when the console says what became of it.
pub(super) const OUTCOME_RECORDS_MAX: u32 = 1_000;

/// What became of request `id`, which is no longer pending, from the audit (read as the person):
/// approved or denied (by whom, when), or expired. A request leaves the pending list only so; the
/// expiry's own record is written at the cluster's next change after it, so a request with
/// neither record has expired.
pub(super) async fn closed_words(user: &SignedIn, id: u64) -> String {
    use proto::AuditAction as A;
    let generic = format!(
        "Request {id} is not pending: it was approved, denied or has expired. The key's page and its audit show what happened."
    );
    let Ok(answer) = user
        .client
        .query_audit(proto::QueryAuditRequest {
            namespace: None,
            key: None,
            revision_min: id,
            revision_max: None,
            limit: OUTCOME_RECORDS_MAX,
            allow_stale: false,
        })
        .await
    else {
        return generic;
    };
    let records: Vec<&proto::AuditRecord> = answer
        .records
        .iter()
        .filter(|r| r.force_release_id == Some(id))
        .collect();
    let Some(asked) = records
        .iter()
        .find(|r| r.action == A::ForceReleaseRequested as i32)
    else {
        return generic;
    };
    let what = format!(
        "Request {id} ({} / {}, token {}, by {} at {})",
        asked.namespace,
        asked.key,
        asked.token.unwrap_or_default(),
        if asked.requester.is_empty() {
            &asked.actor
        } else {
            &asked.requester
        },
        crate::wall_clock::utc(asked.time_ms)
    );
    let outcome = records.iter().find(|r| {
        [
            A::ForceReleaseApproved as i32,
            A::ForceReleaseDenied as i32,
            A::ForceReleaseExpired as i32,
        ]
        .contains(&r.action)
    });
    let at = |r: &proto::AuditRecord| crate::wall_clock::utc(r.time_ms);
    match outcome {
        Some(r) if r.action == A::ForceReleaseApproved as i32 => format!(
            "{what} is no longer pending: it was approved by {} at {}.",
            crate::audit_report::actor_words(r),
            at(r)
        ),
        Some(r) if r.action == A::ForceReleaseDenied as i32 => format!(
            "{what} is no longer pending: it was denied by {} at {} ({}).",
            crate::audit_report::actor_words(r),
            at(r),
            r.reason
        ),
        Some(r) => format!(
            "{what} has expired (recorded at {}): nobody approved it in time, and nothing was released. Request again from the key's page if it is still needed.",
            at(r)
        ),
        None => format!(
            "{what} has expired: nobody approved it in time, and nothing was released (the audit records the expiry at the cluster's next change). Request again from the key's page if it is still needed."
        ),
    }
}

pub(super) async fn approval_page(Viewer(user): Viewer, Path(id): Path<u64>) -> Response {
    approval(&user, id, None, StatusCode::OK).await
}

pub(super) async fn approval(
    user: &SignedIn,
    id: u64,
    error: Option<Refused>,
    status: StatusCode,
) -> Response {
    let request = match pending(user, id).await {
        Ok(Some(request)) => request,
        Ok(None) => {
            return message(
                Some(Who::of(user)),
                StatusCode::NOT_FOUND,
                &format!("Force-release request {id}"),
                error,
                vec![closed_words(user, id).await],
            )
        }
        Err(error) => {
            return message(
                Some(Who::of(user)),
                Refused::status(&error),
                &format!("Force-release request {id}"),
                Some(Refused::of(&error)),
                vec![],
            )
        }
    };
    let now = inspect(user, &request.namespace, &request.key)
        .await
        .ok()
        .map(|info| KeyView::of(&info));
    let own_request = request.requester == user.principal;
    render(
        &ApprovalPage {
            who: Some(Who::of(user)),
            r: PendingView::of(&request),
            now,
            own_request,
            error,
        },
        status,
    )
}

#[derive(Deserialize)]
pub(super) struct ApproveFields {
    #[serde(default)]
    pub(super) csrf: String,
    /// The class kind, typed by the approver: `fenced` or `advisory`.
    #[serde(default)]
    pub(super) kind: String,
}

pub(super) async fn approve(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(fields): Form<ApproveFields>,
) -> Response {
    let user = match signed_in_post(&console, &headers, &fields.csrf) {
        Ok(user) => user,
        Err(refused) => return *refused,
    };
    let acknowledged_fenced = match fields.kind.trim().to_ascii_lowercase().as_str() {
        "fenced" => true,
        "advisory" => false,
        _ => {
            let refusal = Refused::console(
                "class_kind_not_typed",
                "type the class's kind as the request shows it, `fenced` or `advisory`: nothing was approved",
            );
            return approval(&user, id, Some(refusal), StatusCode::BAD_REQUEST).await;
        }
    };
    // The key, for the outcome's link to the verify page (the request is gone once approved).
    let key = pending(&user, id)
        .await
        .ok()
        .flatten()
        .map(|r| (r.namespace, r.key));
    let approved = user
        .client
        .approve_force_release(proto::ApproveForceReleaseRequest {
            force_release_id: id,
            acknowledged_fenced,
        })
        .await;
    match approved {
        Ok(answer) => {
            let mut lines = vec![if answer.fenced {
                format!(
                    "Released token {} of this fenced lock; the key's floor is now {}: every token below it is refused by the fencing resource.",
                    answer.released_token, answer.floor
                )
            } else {
                // An advisory lock's resource checks no token: claim no fencing.
                format!(
                    "Released token {} of this ADVISORY lock (the key's floor is now {}). Nothing refuses the old holder's writes: if it is still running, two writers may act at once. Confirm with the class owner that the old process is gone, and check the resource for a double write.",
                    answer.released_token, answer.floor
                )
            }];
            match answer.next {
                Some(next) => lines.push(format!(
                    "The next waiter, session {}, holds it now with token {}.",
                    next.session_id, next.token
                )),
                None => lines.push("Nobody was waiting: the key is free.".to_owned()),
            }
            match answer.session_revoked {
                Some(session) => lines.push(format!(
                    "Session {session} was revoked in the same revision: its client learns it at once on its session stream (else at its next keepalive) and stops."
                )),
                None => lines.push("The holder's session was not revoked: a Picket client learns that this lock is gone, at once on its session stream (else at its next keepalive); a process that does not use one learns nothing.".to_owned()),
            }
            render(
                &MessagePage {
                    who: Some(Who::of(&user)),
                    title: format!("Force-release {id} approved"),
                    lines,
                    links: key
                        .iter()
                        .map(|(ns, key)| {
                            (
                                verify::verify_href(ns, key, Some(id)),
                                "Verify: the key's lock log, the queue draining, when the old holder learned it, the alert".to_owned(),
                            )
                        })
                        .chain([("/console/".to_owned(), "Overview".to_owned())])
                        .collect(),
                    error: None,
                },
                StatusCode::OK,
            )
        }
        Err(error) => {
            approval(
                &user,
                id,
                Some(Refused::of(&error)),
                Refused::status(&error),
            )
            .await
        }
    }
}

#[derive(Deserialize)]
pub(super) struct DenyFields {
    #[serde(default)]
    pub(super) csrf: String,
    #[serde(default)]
    pub(super) reason: String,
}

pub(super) async fn deny(
    State(console): State<Console>,
    headers: HeaderMap,
    Path(id): Path<u64>,
    Form(fields): Form<DenyFields>,
) -> Response {
    let user = match signed_in_post(&console, &headers, &fields.csrf) {
        Ok(user) => user,
        Err(refused) => return *refused,
    };
    let denied = user
        .client
        .deny_force_release(proto::DenyForceReleaseRequest {
            force_release_id: id,
            reason: fields.reason.trim().to_owned(),
        })
        .await;
    match denied {
        Ok(_) => message(
            Some(Who::of(&user)),
            StatusCode::OK,
            &format!("Force-release {id} denied"),
            None,
            vec!["The request is closed; nothing was released. The audit records the denial and its reason.".to_owned()],
        ),
        Err(error) => approval(&user, id, Some(Refused::of(&error)), Refused::status(&error)).await,
    }
}
