//! Classes (admin): `/console/classes` lists a namespace's classes (`Admin.ListClasses`), and the
//! class form (`/console/classes/edit`) creates or edits one with `Admin.PutClass`, as the
//! signed-in person. Every rule is the server's: the role (`picket-admin`, as for the gRPC call),
//! the names and sizes the edge checks and the state machine's class rules (TTL order, the
//! cluster's bounds). A refusal names its rule and is shown next to the field it concerns
//! (`ErrorDetail.field`); nothing is changed.
//!
//! The console adds two guards of its own, both before anything is sent: the create form does not
//! replace a class that exists (edit it instead), and an edit that changes the class's kind is
//! sent only with the new kind typed, after a banner that says what the change means for the
//! keys held under the class and for the force-release requests pending on them.

use std::collections::BTreeSet;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use picket_client::ClientError;
use picket_core::locks::{ClassSpec, LockConfig, Role};
use picket_proto::proto;
use serde::Deserialize;

use super::view::{encode_path, key_href, kind_word, ClassView, PendingView};
use super::{inspect, render, signed_in_post, Console, Refused, Viewer, Who};
use crate::auth::roles::{AuthMethod, Caller};
use crate::console::signin::SignedIn;

/// Held keys of the class the kind-change banner looks up at most (each is one `Inspect`).
const HELD_KEYS_SHOWN_MAX: usize = 20;

#[derive(Deserialize, Default)]
pub(super) struct ClassesQuery {
    #[serde(default)]
    namespace: String,
    /// After a change: the prefix of the class that was saved, and whether it replaced one.
    saved: Option<String>,
    #[serde(default)]
    replaced: bool,
}

#[derive(Deserialize, Default)]
pub(super) struct EditQuery {
    #[serde(default)]
    namespace: String,
    /// The class to edit; absent: a new class.
    prefix: Option<String>,
}

/// One class in the list.
struct ClassRow {
    c: ClassView,
    /// `"" (the namespace's default class)` or the prefix in quotes.
    prefix_words: String,
    ttl_default: String,
    ttl_max: String,
    edit_href: String,
}

#[derive(Template)]
#[template(path = "console/classes.html")]
struct ClassesPage {
    who: Option<Who>,
    error: Option<Refused>,
    namespace: String,
    rows: Vec<ClassRow>,
    /// Read at all (a namespace was named and the list answered).
    listed: bool,
    role: RoleNote,
    new_href: String,
    saved: String,
}

/// Whether the signed-in person has the role the server asks for class changes, in words.
struct RoleNote {
    admin: bool,
    roles: String,
}

impl RoleNote {
    /// By the server's own role rules ([`Caller`]): `picket-admin` in every namespace or
    /// `picket-admin:<namespace>`. Only a hint: the server checks the role of every change.
    fn of(user: &SignedIn, namespace: &str) -> RoleNote {
        let mut caller = Caller {
            principal: user.principal.clone(),
            roles: Default::default(),
            namespace_roles: Default::default(),
            lock_roles: Default::default(),
            method: AuthMethod::InsecureDev,
        };
        for role in &user.roles {
            caller.add_role_value(role);
        }
        let namespace = (!namespace.is_empty()).then_some(namespace);
        RoleNote {
            admin: caller.actor(namespace).has_any(&[Role::ClassAdmin]),
            roles: if user.roles.is_empty() {
                "none".to_owned()
            } else {
                user.roles.join(", ")
            },
        }
    }
}

/// What the class form holds (kept as typed when a refusal sends it back).
#[derive(Clone, Default)]
struct ClassForm {
    namespace: String,
    name: String,
    prefix: String,
    fenced: bool,
    ttl_default: String,
    ttl_max: String,
    hold_max: String,
    owner: String,
    runbook_url: String,
    description: String,
}

impl ClassForm {
    fn of(namespace: &str, class: &proto::ClassSpec) -> ClassForm {
        ClassForm {
            namespace: namespace.to_owned(),
            name: class.name.clone(),
            prefix: class.prefix.clone(),
            fenced: class.fenced,
            ttl_default: class.session_ttl_ms_default.to_string(),
            ttl_max: class.session_ttl_ms_max.to_string(),
            hold_max: class.hold_ms_max_expected.to_string(),
            owner: class.owner.clone(),
            runbook_url: class.runbook_url.clone(),
            description: class.description.clone(),
        }
    }

    /// A new class starts with the cluster's default TTLs (the state machine's defaults).
    fn new(namespace: &str) -> ClassForm {
        let d = LockConfig::default();
        ClassForm {
            namespace: namespace.to_owned(),
            ttl_default: d.session_ttl_ms_default.to_string(),
            ttl_max: d.session_ttl_ms_max.to_string(),
            hold_max: "0".to_owned(),
            ..ClassForm::default()
        }
    }
}

/// A rule shown next to one field (`""`: none).
#[derive(Default)]
struct FieldErrors {
    namespace: String,
    name: String,
    prefix: String,
    ttl_default: String,
    ttl_max: String,
    hold_max: String,
    owner: String,
    runbook_url: String,
    description: String,
    confirm: String,
}

impl FieldErrors {
    /// The slot of a request field the server named (`put_class.class.session_ttl_ms_max`);
    /// `None`: the refusal is about the whole form (a role, a bound on classes).
    fn slot(&mut self, field: &str) -> Option<&mut String> {
        let last = field.rsplit('.').next().unwrap_or("");
        Some(match last {
            "namespace" => &mut self.namespace,
            "name" => &mut self.name,
            "prefix" => &mut self.prefix,
            "session_ttl_ms_default" => &mut self.ttl_default,
            "session_ttl_ms_max" => &mut self.ttl_max,
            "hold_ms_max_expected" => &mut self.hold_max,
            "owner" => &mut self.owner,
            "runbook_url" => &mut self.runbook_url,
            "description" => &mut self.description,
            _ => return None,
        })
    }
}

/// What changing the class's kind means, shown before the change is sent.
struct KindChange {
    from: &'static str,
    to: &'static str,
    /// The word to type: `fenced` or `advisory`.
    to_typed: &'static str,
    /// The consequences, in words.
    lines: Vec<String>,
    /// Pending force-release requests on keys of this class: no longer approvable.
    pending: Vec<PendingView>,
    /// Keys of this class held now (key, key page).
    held: Vec<(String, String)>,
    /// More candidates were held than looked up.
    held_more: bool,
}

#[derive(Template)]
#[template(path = "console/class_form.html")]
struct ClassFormPage {
    who: Option<Who>,
    error: Option<Refused>,
    form: ClassForm,
    errors: FieldErrors,
    /// Editing the class registered at `form.prefix` (its prefix is fixed); else a new class.
    editing: bool,
    /// The kind the edited class has in the cluster, as the form was loaded (`""`: new).
    kind_loaded: &'static str,
    change: Option<KindChange>,
    confirm: String,
    role: RoleNote,
    list_href: String,
}

fn list_href(namespace: &str) -> String {
    format!("/console/classes?namespace={}", encode_path(namespace))
}

fn prefix_words(prefix: &str) -> String {
    if prefix.is_empty() {
        "\"\" (the namespace's default class)".to_owned()
    } else {
        format!("\"{prefix}\"")
    }
}

/// The form for a new class in `namespace`.
fn new_href(namespace: &str) -> String {
    format!("/console/classes/edit?namespace={}", encode_path(namespace))
}

fn edit_href(namespace: &str, prefix: &str) -> String {
    format!(
        "/console/classes/edit?namespace={}&prefix={}",
        encode_path(namespace),
        encode_path(prefix).replace('/', "%2F")
    )
}

async fn list(user: &SignedIn, namespace: &str) -> Result<Vec<proto::ClassSpec>, ClientError> {
    Ok(user
        .client
        .list_classes(proto::ListClassesRequest {
            namespace: namespace.to_owned(),
            allow_stale: false,
        })
        .await?
        .classes)
}

pub(super) async fn classes_page(
    Viewer(user): Viewer,
    Query(query): Query<ClassesQuery>,
) -> Response {
    let namespace = query.namespace.trim().to_owned();
    let mut page = ClassesPage {
        who: Some(Who::of(&user)),
        error: None,
        role: RoleNote::of(&user, &namespace),
        new_href: new_href(&namespace),
        namespace,
        rows: Vec::new(),
        listed: false,
        saved: match &query.saved {
            Some(prefix) => format!(
                "The class at prefix {} was {} (the audit records the change).",
                prefix_words(prefix),
                if query.replaced {
                    "replaced"
                } else {
                    "created"
                }
            ),
            None => String::new(),
        },
    };
    if page.namespace.is_empty() {
        return render(&page, StatusCode::OK);
    }
    match list(&user, &page.namespace).await {
        Ok(classes) => {
            page.listed = true;
            page.rows = classes
                .iter()
                .map(|c| ClassRow {
                    c: ClassView::of(c),
                    prefix_words: prefix_words(&c.prefix),
                    ttl_default: ClassView::threshold_words(c.session_ttl_ms_default),
                    ttl_max: ClassView::threshold_words(c.session_ttl_ms_max),
                    edit_href: edit_href(&page.namespace, &c.prefix),
                })
                .collect();
            render(&page, StatusCode::OK)
        }
        Err(error) => {
            let status = Refused::status(&error);
            page.error = Some(Refused::of(&error));
            render(&page, status)
        }
    }
}

pub(super) async fn class_form_page(
    Viewer(user): Viewer,
    Query(query): Query<EditQuery>,
) -> Response {
    let namespace = query.namespace.trim().to_owned();
    let mut page = ClassFormPage {
        who: Some(Who::of(&user)),
        error: None,
        form: ClassForm::new(&namespace),
        errors: FieldErrors::default(),
        editing: false,
        kind_loaded: "",
        change: None,
        confirm: String::new(),
        role: RoleNote::of(&user, &namespace),
        list_href: list_href(&namespace),
    };
    let Some(prefix) = query.prefix else {
        return render(&page, StatusCode::OK);
    };
    match list(&user, &namespace).await {
        Ok(classes) => match classes.iter().find(|c| c.prefix == prefix) {
            Some(class) => {
                page.form = ClassForm::of(&namespace, class);
                page.editing = true;
                page.kind_loaded = kind_word(class.fenced);
                render(&page, StatusCode::OK)
            }
            None => {
                page.form.prefix = prefix.clone();
                page.error = Some(Refused::console(
                    "unknown_class",
                    format!(
                        "namespace `{namespace}` has no class registered at prefix {}: fill in the form to create one",
                        prefix_words(&prefix)
                    ),
                ));
                render(&page, StatusCode::NOT_FOUND)
            }
        },
        Err(error) => {
            let status = Refused::status(&error);
            page.error = Some(Refused::of(&error));
            render(&page, status)
        }
    }
}

#[derive(Deserialize)]
pub(super) struct ClassFields {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    prefix: String,
    /// `fenced` or `advisory` (radio buttons).
    #[serde(default)]
    kind: String,
    #[serde(default)]
    session_ttl_ms_default: String,
    #[serde(default)]
    session_ttl_ms_max: String,
    #[serde(default)]
    hold_ms_max_expected: String,
    #[serde(default)]
    owner: String,
    #[serde(default)]
    runbook_url: String,
    #[serde(default)]
    description: String,
    /// Present when the form edits the class at `prefix` (else it creates one).
    #[serde(default)]
    editing: Option<String>,
    /// The new kind, typed to confirm a change of kind.
    #[serde(default)]
    confirm_kind: String,
}

/// A whole number of milliseconds, or the rule in words for the field.
fn ms(text: &str, what: &str) -> Result<u64, String> {
    text.trim().parse::<u64>().map_err(|_| {
        format!("{what} is a whole number of milliseconds (0 or more); {text:?} is not: nothing was changed")
    })
}

pub(super) async fn put_class(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(fields): Form<ClassFields>,
) -> Response {
    let user = match signed_in_post(&console, &headers, &fields.csrf) {
        Ok(user) => user,
        Err(refused) => return *refused,
    };
    let namespace = fields.namespace.trim().to_owned();
    let form = ClassForm {
        namespace: namespace.clone(),
        name: fields.name.trim().to_owned(),
        prefix: fields.prefix.clone(),
        fenced: fields.kind == "fenced",
        ttl_default: fields.session_ttl_ms_default.clone(),
        ttl_max: fields.session_ttl_ms_max.clone(),
        hold_max: fields.hold_ms_max_expected.clone(),
        owner: fields.owner.trim().to_owned(),
        runbook_url: fields.runbook_url.trim().to_owned(),
        description: fields.description.trim().to_owned(),
    };
    let editing = fields.editing.is_some();
    let mut page = ClassFormPage {
        who: Some(Who::of(&user)),
        error: None,
        form: form.clone(),
        errors: FieldErrors::default(),
        editing,
        kind_loaded: "",
        change: None,
        confirm: fields.confirm_kind.clone(),
        role: RoleNote::of(&user, &namespace),
        list_href: list_href(&namespace),
    };
    if !matches!(fields.kind.as_str(), "fenced" | "advisory") {
        page.error = Some(Refused::console(
            "kind_not_chosen",
            "choose the class's kind, fenced or advisory: nothing was changed",
        ));
        return render(&page, StatusCode::BAD_REQUEST);
    }
    let numbers = [
        (&form.ttl_default, "the default session TTL"),
        (&form.ttl_max, "the max session TTL"),
        (&form.hold_max, "the max expected hold"),
    ]
    .map(|(text, what)| ms(text, what));
    if let [Ok(ttl_default), Ok(ttl_max), Ok(hold_max)] = numbers {
        let class = proto::ClassSpec {
            name: form.name.clone(),
            prefix: form.prefix.clone(),
            fenced: form.fenced,
            session_ttl_ms_default: ttl_default,
            session_ttl_ms_max: ttl_max,
            hold_ms_max_expected: hold_max,
            owner: form.owner.clone(),
            runbook_url: form.runbook_url.clone(),
            description: form.description.clone(),
        };
        return put_checked(&user, page, class).await;
    }
    let [ttl_default, ttl_max, hold_max] = numbers;
    page.errors.ttl_default = ttl_default.err().unwrap_or_default();
    page.errors.ttl_max = ttl_max.err().unwrap_or_default();
    page.errors.hold_max = hold_max.err().unwrap_or_default();
    page.error = Some(Refused::console(
        "bad_number",
        "a duration is a whole number of milliseconds (see the field marked below): nothing was changed",
    ));
    render(&page, StatusCode::BAD_REQUEST)
}

/// The console's guards (an existing class is not replaced by the create form; a change of kind
/// needs the new kind typed), then `PutClass`.
async fn put_checked(
    user: &SignedIn,
    mut page: ClassFormPage,
    class: proto::ClassSpec,
) -> Response {
    let namespace = page.form.namespace.clone();
    let existing = match list(user, &namespace).await {
        Ok(classes) => classes.into_iter().find(|c| c.prefix == class.prefix),
        Err(error) => return refused(page, &error),
    };
    if let Some(existing) = &existing {
        page.kind_loaded = kind_word(existing.fenced);
        if !page.editing {
            page.errors.prefix = format!(
                "class `{}` is already registered at this prefix: edit it instead (the create form does not replace a class)",
                existing.name
            );
            page.error = Some(Refused::console(
                "class_exists",
                "a class is already registered at this prefix: nothing was changed",
            ));
            return render(&page, StatusCode::CONFLICT);
        }
        if existing.fenced != class.fenced {
            let to_typed = if class.fenced { "fenced" } else { "advisory" };
            let typed = page.confirm.trim().to_ascii_lowercase();
            if typed != to_typed {
                page.change = Some(kind_change(user, &namespace, existing, class.fenced).await);
                let (rule, status, message) = if typed.is_empty() {
                    (
                        "kind_change_not_confirmed",
                        StatusCode::CONFLICT,
                        format!("this changes the class's kind: read what it means below and type `{to_typed}` to confirm; nothing was changed yet"),
                    )
                } else {
                    (
                        "kind_change_not_confirmed",
                        StatusCode::BAD_REQUEST,
                        format!("you typed {typed:?}, not `{to_typed}`: nothing was changed"),
                    )
                };
                page.errors.confirm = message.clone();
                page.error = Some(Refused::console(rule, message));
                return render(&page, status);
            }
        }
    }
    let answer = user
        .client
        .put_class(proto::PutClassRequest {
            namespace: namespace.clone(),
            class: Some(class.clone()),
        })
        .await;
    match answer {
        Ok(answer) => Redirect::to(&format!(
            "{}&saved={}&replaced={}",
            list_href(&namespace),
            encode_path(&class.prefix).replace('/', "%2F"),
            answer.replaced
        ))
        .into_response(),
        Err(error) => refused(page, &error),
    }
}

/// The form again with the server's refusal, next to the field it names when it names one.
fn refused(mut page: ClassFormPage, error: &ClientError) -> Response {
    let status = Refused::status(error);
    let refusal = Refused::of(error);
    if let ClientError::Refused { refusal: r, .. } = error {
        if let Some(slot) = page.errors.slot(&r.field) {
            *slot = format!("{} (rule {})", r.message, refusal.rule);
        }
    }
    page.error = Some(refusal);
    render(&page, status)
}

/// What changing the kind of `existing` to `fenced` means: in words, and the pending requests
/// and held keys of the class (each key's class as the server answers `Inspect`: the console does
/// not work out which class covers a key).
async fn kind_change(
    user: &SignedIn,
    namespace: &str,
    existing: &proto::ClassSpec,
    fenced: bool,
) -> KindChange {
    let (from, to) = (kind_word(existing.fenced), kind_word(fenced));
    let covered = |info: &proto::KeyInfo| {
        info.class
            .as_ref()
            .is_some_and(|c| c.prefix == existing.prefix && c.name == existing.name)
    };
    let mut pending = Vec::new();
    if let Ok(listed) = user
        .client
        .list_force_releases(proto::ListForceReleasesRequest { allow_stale: false })
        .await
    {
        for request in listed.requests.iter().filter(|r| r.namespace == namespace) {
            if let Ok(info) = inspect(user, &request.namespace, &request.key).await {
                if covered(&info) {
                    pending.push(PendingView::of(request));
                }
            }
        }
    }
    let mut held = Vec::new();
    let mut held_more = false;
    if let Ok(holds) = user
        .client
        .list_holds(proto::ListHoldsRequest {
            namespace: namespace.to_owned(),
            limit: 0,
            allow_stale: false,
        })
        .await
    {
        let keys: BTreeSet<&str> = holds
            .holds
            .iter()
            .map(|h| h.key.as_str())
            .filter(|k| k.starts_with(&existing.prefix))
            .collect();
        held_more = keys.len() > HELD_KEYS_SHOWN_MAX;
        for key in keys.into_iter().take(HELD_KEYS_SHOWN_MAX) {
            if let Ok(info) = inspect(user, namespace, key).await {
                if covered(&info) {
                    held.push((key.to_owned(), key_href(namespace, key)));
                }
            }
        }
    }
    let mut lines = vec![format!(
        "Held locks of this class keep their holders, tokens and floors: nothing is released. From the change on, every page, picketctl and the force-release flow treat them as {to}: {}.",
        ClassSpec::safety_statement(fenced)
    )];
    if fenced {
        lines.push("Choose FENCED only if every resource behind these keys checks the lock token and refuses lower ones: the on-call will be told that a force-release is safe once the next holder writes. If a resource does not check tokens, a force-release approved as FENCED can let two writers in.".to_owned());
    } else {
        lines.push("As ADVISORY, nothing refuses an old holder's writes: a force-release asks the on-call the advisory checklist (has the holder stopped? is a double run acceptable?) before it is requested.".to_owned());
    }
    lines.push(format!(
        "Pending force-release requests made while the class was {from} can no longer be approved: the server refuses their approval (rule class_kind_changed). Deny each and request again; the new request shows {to}."
    ));
    lines.push(
        "Session TTL changes apply to later acquires only; existing holds and waits stay."
            .to_owned(),
    );
    KindChange {
        from,
        to,
        to_typed: if fenced { "fenced" } else { "advisory" },
        lines,
        pending,
        held,
        held_more,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_field_finds_its_form_field() {
        let mut errors = FieldErrors::default();
        *errors.slot("put_class.class.session_ttl_ms_max").unwrap() = "too long".into();
        *errors.slot("put_class.namespace").unwrap() = "bad".into();
        assert_eq!(errors.ttl_max, "too long");
        assert_eq!(errors.namespace, "bad");
        assert!(errors.slot("").is_none());
        assert!(errors.slot("put_class.class").is_none());
    }

    #[test]
    fn a_duration_must_be_whole_milliseconds() {
        assert_eq!(ms(" 30000 ", "x"), Ok(30_000));
        let rule = ms("30s", "the max session TTL").unwrap_err();
        assert!(rule.starts_with("the max session TTL is a whole number of milliseconds"));
    }

    #[test]
    fn the_default_class_is_named_in_words() {
        assert_eq!(prefix_words(""), "\"\" (the namespace's default class)");
        assert_eq!(
            edit_href("orders", "ledger/"),
            "/console/classes/edit?namespace=orders&prefix=ledger%2F"
        );
    }
}
