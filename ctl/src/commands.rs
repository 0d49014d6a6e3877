//! The commands that ask once and print one answer.

use std::fmt::Write as _;
use std::io::IsTerminal as _;

use picket_client::Client;
use picket_proto::proto;
use picket_proto::secret::SessionSecret;
use serde_json::json;

use super::confirm::Confirm;
use super::render::{self, fenced_words, holder_learns, Report};
use super::{Ack, Answer, ClassesAction, Command, CtlError, ForceRelease, SemaphoreAction};

pub async fn one_shot(client: &Client, command: Command) -> Result<Report, CtlError> {
    match command {
        Command::Unlock {
            namespace,
            key,
            session,
            token,
            secret,
        } => {
            let secret = SessionSecret::from_hex(&secret)
                .map_err(|e| CtlError::Refused(format!("--secret: {}", e.rule)))?;
            unlock(client, (&namespace, &key), session, &secret, token).await
        }
        Command::Inspect {
            namespace,
            key,
            stale,
        } => {
            let info = client
                .inspect(proto::InspectRequest {
                    namespace,
                    key,
                    allow_stale: stale,
                })
                .await?;
            Ok(render::key_info(&info))
        }
        Command::Holds {
            namespace,
            limit,
            stale,
        } => {
            let request = proto::ListHoldsRequest {
                namespace: namespace.clone(),
                limit,
                allow_stale: stale,
            };
            Ok(render::holds(
                &namespace,
                &client.list_holds(request).await?,
            ))
        }
        Command::Classes { namespace, action } => classes(client, namespace, action).await,
        Command::Audit {
            namespace,
            key,
            from,
            to,
            limit,
        } => {
            let request = proto::QueryAuditRequest {
                namespace,
                key,
                revision_min: from,
                revision_max: to,
                limit,
                allow_stale: false,
            };
            Ok(render::audit(&client.query_audit(request).await?))
        }
        Command::ForceRelease(step) => force_release(client, step).await,
        Command::Semaphore(SemaphoreAction::Set {
            namespace,
            key,
            permits,
            reason,
        }) => {
            let request = proto::SetSemaphoreRequest {
                namespace: namespace.clone(),
                key: key.clone(),
                permits,
                reason,
            };
            let response = client.set_semaphore(request).await?;
            Ok(render::semaphore_set(&namespace, &key, permits, &response))
        }
        Command::Session { .. }
        | Command::Lock(_)
        | Command::Watch { .. }
        | Command::Cluster(_)
        | Command::Snapshot(_) => Err(CtlError::Io(
            "internal: a command with its own runner reached one_shot".into(),
        )),
    }
}

/// Releases a hold of the caller's own session (proved by its secret). The request id is taken
/// from the clock (milliseconds since the epoch), above any id the session's own client has used
/// unless it sent more than one request per millisecond of its life, so it is not mistaken for
/// one of its retries.
async fn unlock(
    client: &Client,
    (namespace, key): (&str, &str),
    session: u64,
    secret: &SessionSecret,
    token: u64,
) -> Result<Report, CtlError> {
    let request_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(1)
        .max(1);
    let response = client
        .release_raw(proto::ReleaseRequest {
            session_id: session,
            request_id,
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            token,
            session_secret: secret.as_bytes().to_vec(),
        })
        .await?;
    let next = response.next.as_ref();
    let json = json!({
        "namespace": namespace,
        "key": key,
        "released_token": response.token,
        "next": next.map(|g| json!({"session_id": g.session_id, "token": g.token})),
    });
    let mut human = format!("released {namespace}/{key} (token {token})\n");
    if let Some(next) = next {
        let _ = writeln!(
            human,
            "granted next to session {} with token {}",
            next.session_id, next.token
        );
    }
    Ok(Report { json, human })
}

async fn classes(
    client: &Client,
    namespace: Option<String>,
    action: Option<ClassesAction>,
) -> Result<Report, CtlError> {
    match action {
        Some(ClassesAction::Put {
            namespace,
            name,
            prefix,
            fenced,
            ttl_ms_default,
            ttl_ms_max,
            hold_ms_max_expected,
            owner,
            runbook_url,
            description,
        }) => {
            let class = proto::ClassSpec {
                name,
                prefix,
                fenced,
                session_ttl_ms_default: ttl_ms_default,
                session_ttl_ms_max: ttl_ms_max,
                hold_ms_max_expected,
                owner,
                runbook_url,
                description,
            };
            let response = client
                .put_class(proto::PutClassRequest {
                    namespace: namespace.clone(),
                    class: Some(class.clone()),
                })
                .await?;
            let verb = if response.replaced {
                "replaced"
            } else {
                "created"
            };
            Ok(Report {
                json: json!({"namespace": namespace, "replaced": response.replaced, "class": render::class_json(&class)}),
                human: format!(
                    "{verb} class {} for {namespace}/{:?}*: {}\n",
                    class.name,
                    class.prefix,
                    fenced_words(class.fenced)
                ),
            })
        }
        Some(ClassesAction::Remove { namespace, prefix }) => {
            client
                .remove_class(proto::RemoveClassRequest {
                    namespace: namespace.clone(),
                    prefix: prefix.clone(),
                })
                .await?;
            Ok(Report {
                json: json!({"namespace": namespace, "prefix": prefix, "removed": true}),
                human: format!("removed the class of {namespace}/{prefix:?}*\n"),
            })
        }
        None => {
            let namespaces = match namespace {
                Some(namespace) => vec![namespace],
                None => {
                    let longest = client
                        .longest_holds(proto::LongestHoldsRequest { allow_stale: false })
                        .await?;
                    let mut namespaces: Vec<String> =
                        longest.holds.into_iter().map(|h| h.namespace).collect();
                    namespaces.dedup();
                    namespaces
                }
            };
            let mut listing = Vec::with_capacity(namespaces.len());
            for namespace in namespaces {
                let response = client
                    .list_classes(proto::ListClassesRequest {
                        namespace: namespace.clone(),
                        allow_stale: false,
                    })
                    .await?;
                listing.push((namespace, response.classes));
            }
            Ok(render::classes(&listing))
        }
    }
}

async fn force_release(client: &Client, step: ForceRelease) -> Result<Report, CtlError> {
    match step {
        ForceRelease::Request {
            namespace,
            key,
            token,
            session,
            reason,
            revoke_session,
            holder_stopped,
            double_run_acceptable,
            statement,
        } => {
            // Show what is being released first: holder, token, age, queue, fenced.
            let info = client
                .inspect(proto::InspectRequest {
                    namespace: namespace.clone(),
                    key: key.clone(),
                    allow_stale: false,
                })
                .await?;
            let shown = render::key_info(&info);
            let fenced = info.class.as_ref().is_some_and(|c| c.fenced);
            // An advisory lock's old holder is refused by nothing: the checklist is required
            // before anything is sent (the console asks the same two questions).
            if !fenced && (holder_stopped.is_none() || double_run_acceptable.is_none()) {
                return Err(CtlError::Refused(format!(
                    "{}\n{namespace}/{key} is an ADVISORY lock: nothing will refuse the old holder's \
                     writes once it is released. Answer the checklist first: --holder-stopped \
                     yes|no|unknown (has its process stopped?) and --double-run-acceptable yes|no \
                     (may the old holder and the next one both run?). Nothing was sent.",
                    shown.human
                )));
            }
            let checklist = (holder_stopped.is_some()
                || double_run_acceptable.is_some()
                || !statement.is_empty())
            .then(|| proto::ForceReleaseChecklist {
                holder_stopped: holder_stopped.map_or(0, Answer::to_wire),
                double_run_acceptable: double_run_acceptable.map_or(0, Answer::to_wire),
                statement,
            });
            let response = client
                .request_force_release(proto::RequestForceReleaseRequest {
                    namespace,
                    key,
                    expected_token: token,
                    reason,
                    revoke_session,
                    holder_session_id: session.unwrap_or(0),
                    checklist,
                })
                .await?;
            let json = json!({
                "force_release_id": response.force_release_id,
                "fenced": response.fenced,
                "safety": response.safety,
                "expires_at_ms": response.expires_at_ms,
                "revoke_session": revoke_session,
                "holder_learns": holder_learns(revoke_session),
                "key": shown.json,
            });
            let mut human = shown.human;
            let _ = writeln!(
                human,
                "\nforce-release request #{id} recorded.\n{}\n{}\n{}\nA different person must approve it: \
                 picketctl force-release approve {id} (it shows the request and asks them to type \
                 the class kind they checked; a script passes it with --ack)",
                fenced_words(response.fenced),
                response.safety,
                holder_learns(revoke_session),
                id = response.force_release_id,
            );
            Ok(Report { json, human })
        }
        ForceRelease::Approve { id, ack } => {
            if ack.is_none() && std::io::stdin().is_terminal() {
                // The prompt goes to stderr, so that `--json` output stays one object.
                let mut input = std::io::BufReader::new(std::io::stdin());
                let mut output = std::io::stderr();
                let confirm = Confirm::Prompt {
                    input: &mut input,
                    output: &mut output,
                };
                approve_with(client, id, confirm).await
            } else {
                approve(client, id, ack).await
            }
        }
        ForceRelease::Deny { id, reason } => {
            client
                .deny_force_release(proto::DenyForceReleaseRequest {
                    force_release_id: id,
                    reason,
                })
                .await?;
            Ok(Report {
                json: json!({"force_release_id": id, "denied": true}),
                human: format!("force-release request #{id} denied\n"),
            })
        }
        ForceRelease::List => {
            let response = client
                .list_force_releases(proto::ListForceReleasesRequest { allow_stale: false })
                .await?;
            Ok(render::force_release_list(&response.requests))
        }
    }
}

/// Step two with `--ack` only (`None`: not given, and no terminal to ask at).
pub async fn approve(client: &Client, id: u64, ack: Option<Ack>) -> Result<Report, CtlError> {
    approve_with(client, id, Confirm::Flag(ack)).await
}

/// Step two. Looks the request and its key up first (the key as it is now: holder, token,
/// age, queue), shows them with the fenced flag, and refuses unless the acknowledgement
/// (`--ack` or the answer to the prompt) names that flag, before sending anything that
/// changes state.
pub async fn approve_with(
    client: &Client,
    id: u64,
    confirm: Confirm<'_>,
) -> Result<Report, CtlError> {
    let pending = client
        .list_force_releases(proto::ListForceReleasesRequest { allow_stale: false })
        .await?;
    let Some(request) = pending.requests.iter().find(|r| r.id == id) else {
        return Err(CtlError::Refused(format!(
            "no pending force-release request #{id} (approved, denied or expired already?): see `picketctl force-release list`"
        )));
    };
    // The key as it is now (holder, token, age, queue, class), shown before the question.
    let info = client
        .inspect(proto::InspectRequest {
            namespace: request.namespace.clone(),
            key: request.key.clone(),
            allow_stale: false,
        })
        .await?;
    let fenced_now = info.class.as_ref().map_or(request.fenced, |c| c.fenced);
    let now = render::key_info(&info);
    // What the approver is shown must be what is true now: a request made for another class
    // kind, or for a hold that is gone, cannot be approved (the server refuses it too).
    if fenced_now != request.fenced || request.fenced_now.is_some_and(|f| f != request.fenced) {
        let (was, is) = (
            Ack::from_fenced(request.fenced).word(),
            Ack::from_fenced(fenced_now).word(),
        );
        return Err(CtlError::Refused(format!(
            "{}\nforce-release #{id} of {}/{} was requested when its class was {was}; the class is \
             {is} now:\n{}\nNothing was done. Deny it (picketctl force-release deny {id} --reason \
             ...) and make a new request, which shows the class as it is.",
            now.human,
            request.namespace,
            request.key,
            fenced_words(fenced_now)
        )));
    }
    if request.holder_changed {
        return Err(CtlError::Refused(format!(
            "{}\nforce-release #{id} names session {} with token {}, which no longer holds {}/{}. \
             Nothing was done. Deny it and look again (picketctl inspect {} {}).",
            now.human,
            request.holder_session_id,
            request.token,
            request.namespace,
            request.key,
            request.namespace,
            request.key
        )));
    }
    // The prompt showed the key as it is; the outcome does not show it a second time.
    let prompted = matches!(confirm, Confirm::Prompt { .. });
    confirm.acknowledge(request, &now.human)?;
    let response = client
        .approve_force_release(proto::ApproveForceReleaseRequest {
            force_release_id: id,
            acknowledged_fenced: request.fenced,
        })
        .await?;
    let next = response.next.as_ref();
    // The kind at the release, as the server applied it (it refuses a changed one).
    let fenced = response.fenced;
    let safety = picket_core::locks::ClassSpec::safety_statement(fenced);
    let session_revoked = response.session_revoked.is_some();
    let json = json!({
        "force_release_id": id,
        "fenced": fenced,
        "safety": safety,
        "floor": response.floor,
        "released_token": response.released_token,
        "next": next.map(|g| json!({"session_id": g.session_id, "token": g.token})),
        "session_revoked": response.session_revoked,
        "holder_learns": holder_learns(session_revoked),
        "key_before": now.json,
    });
    let mut human = if prompted { String::new() } else { now.human };
    let _ = write!(
        human,
        "\nforce-release #{id} approved: {}/{} token {} released; new floor {}\n{}\n{}\n{}\n",
        request.namespace,
        request.key,
        response.released_token,
        response.floor,
        fenced_words(fenced),
        safety,
        holder_learns(session_revoked)
    );
    if let Some(next) = next {
        let _ = writeln!(
            human,
            "granted next to session {} with token {}",
            next.session_id, next.token
        );
    }
    if let Some(session) = response.session_revoked {
        let _ = writeln!(human, "session {session} revoked");
    }
    Ok(Report { json, human })
}
