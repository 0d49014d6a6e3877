//! Signing in and out: the sign-in page, the dev sign-in form, the OpenID Connect callback, sign-out.

use super::*;

#[derive(Template)]
#[template(path = "console/signin.html")]
pub(super) struct SigninPage {
    pub(super) who: Option<Who>,
    pub(super) dev: bool,
    /// The issuer people sign in at, with `[oidc.console]`.
    pub(super) issuer: Option<String>,
    pub(super) roles: Vec<(&'static str, &'static str)>,
    /// Why the dev sign-in is off ([`ConsoleConfig::dev_sign_in_off`]).
    pub(super) dev_off: Option<String>,
    pub(super) next: String,
    pub(super) error: Option<Refused>,
}

#[derive(Deserialize)]
pub(super) struct NextQuery {
    pub(super) next: Option<String>,
}

/// Only console paths: never an open redirect.
pub(super) fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(next) if next.starts_with("/console/") && !next.starts_with("/console//") => {
            next.to_owned()
        }
        _ => "/console/".to_owned(),
    }
}

pub(super) async fn signin_page(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(query): Query<NextQuery>,
) -> Response {
    let who = console.sign_ins.current(&headers).map(|u| Who::of(&u));
    let next = safe_next(query.next.as_deref());
    let mut error = None;
    if let (None, Some(oidc)) = (&who, &console.oidc) {
        match oidc.begin(&headers, next.clone()).await {
            Ok((url, binding)) => {
                return (
                    StatusCode::SEE_OTHER,
                    [
                        (
                            header::SET_COOKIE,
                            oidc::binding_cookie(&binding, console.config.secure_cookie),
                        ),
                        (header::LOCATION, url),
                        (header::CACHE_CONTROL, "no-store".to_owned()),
                    ],
                )
                    .into_response()
            }
            Err(refused) => error = Some(Refused::console(refused.rule, refused.message)),
        }
    }
    let status = if error.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    render(
        &SigninPage {
            who,
            dev: console.config.dev_sign_in,
            issuer: console.oidc.as_ref().map(oidc::OidcSignIn::issuer),
            roles: DEV_ROLES.to_vec(),
            dev_off: console.config.dev_sign_in_off.clone(),
            next,
            error,
        },
        status,
    )
}

#[derive(Template)]
#[template(path = "console/signed_in.html")]
pub(super) struct SignedInPage {
    pub(super) who: Option<Who>,
    pub(super) next: String,
    pub(super) error: Option<Refused>,
}

/// The issuer's answer: signs the person in, or says which rule refused (nothing changes).
/// Signed in, it answers with a page that moves on by itself (`<meta http-equiv="refresh">`),
/// not with a redirect: a browser does not send the `SameSite=Strict` cookie on a redirect chain
/// that began at the issuer's site, so the next page would not know the person yet.
pub(super) async fn oidc_callback(
    State(console): State<Console>,
    headers: HeaderMap,
    Query(query): Query<oidc::CallbackQuery>,
) -> Response {
    let Some(sign_in) = &console.oidc else {
        return message(
            None,
            StatusCode::NOT_FOUND,
            "Not signed in",
            Some(Refused::console(
                "sign_in_not_available",
                "this cluster's console has no OpenID Connect sign-in ([oidc.console])",
            )),
            vec![],
        );
    };
    let signed = match sign_in.finish(&headers, &query).await {
        Ok(signed) => signed,
        Err(refused) => {
            return render(
                &MessagePage {
                    who: None,
                    title: "Not signed in".to_owned(),
                    lines: vec!["Nothing was changed: you are not signed in.".to_owned()],
                    links: vec![("/console/signin".to_owned(), "Sign in again".to_owned())],
                    error: Some(Refused::console(
                        refused.rule,
                        format!("{}: nothing was changed; sign in again", refused.message),
                    )),
                },
                StatusCode::FORBIDDEN,
            )
        }
    };
    let client = match console.client_with_token(&signed.access_token) {
        Ok(client) => client,
        Err(error) => {
            return message(
                None,
                StatusCode::INTERNAL_SERVER_ERROR,
                "Not signed in",
                Some(Refused::console("client_config", error.to_string())),
                vec![],
            )
        }
    };
    let id = console.sign_ins.sign_in_for(
        signed.principal.clone(),
        signed.roles.clone(),
        client,
        signed.ttl,
    );
    let user = console.sign_ins.by_id(&id);
    let page = SignedInPage {
        who: user.as_ref().map(Who::of),
        next: signed.next,
        error: None,
    };
    let mut response = render(&page, StatusCode::OK);
    let cookies = response.headers_mut();
    for cookie in [
        signin::set_cookie(&id, console.config.secure_cookie, signed.ttl),
        signin::clear_cookie_named(oidc::BINDING_COOKIE, console.config.secure_cookie),
    ] {
        if let Ok(value) = cookie.parse() {
            cookies.append(header::SET_COOKIE, value);
        }
    }
    response
}

#[derive(Deserialize)]
pub(super) struct SigninForm {
    pub(super) principal: String,
    #[serde(default)]
    pub(super) next: String,
    #[serde(default, rename = "picket-operator")]
    pub(super) operator: Option<String>,
    #[serde(default, rename = "picket-incident-commander")]
    pub(super) incident_commander: Option<String>,
    #[serde(default, rename = "picket-admin")]
    pub(super) admin: Option<String>,
}

pub(super) async fn signin(
    State(console): State<Console>,
    Form(form): Form<SigninForm>,
) -> Response {
    let next = safe_next(Some(&form.next));
    let refuse = |rule: &str, text: &str| {
        render(
            &SigninPage {
                who: None,
                dev: console.config.dev_sign_in,
                issuer: console.oidc.as_ref().map(oidc::OidcSignIn::issuer),
                roles: DEV_ROLES.to_vec(),
                dev_off: console.config.dev_sign_in_off.clone(),
                next: next.clone(),
                error: Some(Refused::console(rule, text)),
            },
            StatusCode::BAD_REQUEST,
        )
    };
    if let Some(why) = &console.config.dev_sign_in_off {
        return refuse("sign_in_not_available", why);
    }
    if !console.config.dev_sign_in {
        return refuse(
            "sign_in_not_available",
            "the dev sign-in is only for clusters that run insecure dev auth (`picketd dev`): sign in through the issuer (GET /console/signin) if [oidc.console] is configured, else use picketctl with your token",
        );
    }
    let principal = form.principal.trim().to_owned();
    if principal.is_empty()
        || principal.len() > crate::auth::roles::PRINCIPAL_LEN_MAX
        || principal.chars().any(|c| c.is_control() || c == ',')
    {
        return refuse(
            "bad_principal",
            "the principal is required: 1 to 256 characters, no control characters or commas",
        );
    }
    let roles: Vec<String> = [
        ("picket-operator", &form.operator),
        ("picket-incident-commander", &form.incident_commander),
        ("picket-admin", &form.admin),
    ]
    .into_iter()
    .filter(|(_, on)| on.is_some())
    .map(|(role, _)| role.to_owned())
    .collect();
    let client = match console.client_for(&principal, &roles) {
        Ok(client) => client,
        Err(error) => return refuse("client_config", &error.to_string()),
    };
    let id = console.sign_ins.sign_in(principal, roles, client);
    (
        StatusCode::SEE_OTHER,
        [
            (
                header::SET_COOKIE,
                signin::set_cookie(&id, console.config.secure_cookie, signin::SIGN_IN_TTL),
            ),
            (header::LOCATION, next),
        ],
    )
        .into_response()
}

#[derive(Deserialize)]
pub(super) struct CsrfForm {
    #[serde(default)]
    pub(super) csrf: String,
}

pub(super) async fn signout(
    State(console): State<Console>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(refused) = signed_in_csrf(&console, &headers, &form.csrf) {
        return *refused;
    }
    console.sign_ins.sign_out(&headers);
    let clear = signin::clear_cookie(console.config.secure_cookie);
    if let Some(sign_in) = &console.oidc {
        // Not back to /console/signin: with the issuer's session still open, that would sign
        // the person straight in again.
        let mut links = vec![("/console/signin".to_owned(), "Sign in again".to_owned())];
        if let Some(url) = sign_in.end_session_url().await {
            links.push((url, "Also sign out at the issuer".to_owned()));
        }
        let mut page = render(
            &MessagePage {
                who: None,
                title: "Signed out".to_owned(),
                lines: vec!["Your console sign-in on this replica has ended.".to_owned()],
                links,
                error: None,
            },
            StatusCode::OK,
        );
        if let Ok(value) = clear.parse() {
            page.headers_mut().insert(header::SET_COOKIE, value);
        }
        return page;
    }
    (
        StatusCode::SEE_OTHER,
        [
            (header::SET_COOKIE, clear),
            (header::LOCATION, "/console/signin".to_owned()),
        ],
    )
        .into_response()
}
