//! A key's page: its holder, waiters and floor, live from the lock log, and the request form.

use super::*;

#[derive(Template)]
#[template(path = "console/key.html")]
pub(super) struct KeyPage {
    pub(super) who: Option<Who>,
    pub(super) k: KeyView,
    pub(super) live_href: String,
    pub(super) request_href: String,
    pub(super) error: Option<Refused>,
    pub(super) form: RequestForm,
}

#[derive(Template)]
#[template(path = "console/key_state.html")]
pub(super) struct KeyState {
    pub(super) k: KeyView,
}

#[derive(Deserialize)]
pub(super) struct OpenKeyQuery {
    #[serde(default)]
    pub(super) namespace: String,
    #[serde(default)]
    pub(super) key: String,
}

/// The overview's "open a key" form.
pub(super) async fn open_key(Query(query): Query<OpenKeyQuery>) -> Response {
    Redirect::to(&key_href(query.namespace.trim(), query.key.trim())).into_response()
}

/// The key as it is now (a linearizable `Admin.Inspect`), read as the signed-in person.
pub(super) async fn inspect(
    user: &SignedIn,
    namespace: &str,
    key: &str,
) -> Result<proto::KeyInfo, ClientError> {
    user.client
        .inspect(proto::InspectRequest {
            namespace: namespace.to_owned(),
            key: key.to_owned(),
            allow_stale: false,
        })
        .await
}

/// The key page of `k`, with the request form as given and an optional refusal.
pub(super) fn key_page_of(
    user: &SignedIn,
    k: KeyView,
    form: RequestForm,
    error: Option<Refused>,
) -> KeyPage {
    let (ns, key) = (k.namespace.clone(), view::encode_path(&k.key));
    KeyPage {
        who: Some(Who::of(user)),
        live_href: format!("/console/live/{ns}/{key}"),
        request_href: format!("/console/request/{ns}/{key}"),
        k,
        error,
        form,
    }
}

#[derive(Deserialize)]
pub(super) struct PartQuery {
    pub(super) part: Option<String>,
}

/// What the request form holds (kept when a refusal sends it back).
#[derive(Default)]
pub(super) struct RequestForm {
    pub(super) token: String,
    pub(super) session: String,
    pub(super) reason: String,
    pub(super) incident: String,
    pub(super) revoke: bool,
    pub(super) stopped: String,
    pub(super) double_run: String,
    pub(super) statement: String,
}

pub(super) async fn key_page(
    State(console): State<Console>,
    headers: HeaderMap,
    Path((namespace, key)): Path<(String, String)>,
    Query(query): Query<PartQuery>,
) -> Response {
    let user = match signed_in(&console, &headers, &key_href(&namespace, &key)) {
        Ok(user) => user,
        Err(redirect) => return *redirect,
    };
    let info = match inspect(&user, &namespace, &key).await {
        Ok(info) => info,
        Err(error) => {
            return message(
                Some(Who::of(&user)),
                Refused::status(&error),
                &format!("{namespace} / {key}"),
                Some(Refused::of(&error)),
                vec![],
            )
        }
    };
    let k = KeyView::of(&info);
    if query.part.as_deref() == Some("state") {
        return render(&KeyState { k }, StatusCode::OK);
    }
    let form = RequestForm {
        token: if k.held {
            k.default_token.to_string()
        } else {
            String::new()
        },
        revoke: true,
        ..RequestForm::default()
    };
    render(&key_page_of(&user, k, form, None), StatusCode::OK)
}

/// Server-sent events for one key: a `change` event (data: the revision) whenever the key's lock
/// log moves, so the page fetches its live part again. Ends when the browser goes away.
pub(super) async fn key_live(
    State(console): State<Console>,
    headers: HeaderMap,
    Path((namespace, key)): Path<(String, String)>,
) -> Response {
    let Some(user) = console.sign_ins.current(&headers) else {
        return (StatusCode::UNAUTHORIZED, "not signed in").into_response();
    };
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(16);
    let mut watcher = user.client.watch_from_now(Some(&namespace), &key);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                page = watcher.next_page() => match page {
                    Ok(events) => {
                        let Some(last) = events.iter().filter(|e| e.key == key).map(|e| e.revision).max() else {
                            continue;
                        };
                        let event = Event::default().event("change").data(last.to_string());
                        if tx.send(Ok(event)).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        let event = Event::default().event("broken").data(error.to_string());
                        let _ = tx.send(Ok(event)).await;
                        return;
                    }
                },
                () = tx.closed() => return,
            }
        }
    });
    Sse::new(ChannelStream::new(rx))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
