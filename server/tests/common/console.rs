//! The console as a browser sees it over HTTP, for the tests that drive its pages without
//! Chromium (`console.rs`, `console_oidc.rs`, `console_mtls.rs`): a cookie-keeping client that
//! does not follow redirects (the tests read them), the dev and the OpenID Connect sign-ins, and
//! the helpers that read pages and URLs.

#![allow(dead_code)]

use std::collections::BTreeMap;

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;
use reqwest::StatusCode;

/// One browser: its cookies (every host here is 127.0.0.1, and cookies ignore ports, as in a
/// browser), redirects read by the test. Paths starting with `/` are taken relative to the base
/// it was made [`Browser::at`]; full URLs are fetched as they are.
pub struct Browser {
    pub http: reqwest::Client,
    pub base: String,
    pub cookies: BTreeMap<String, String>,
}

pub struct Page {
    pub status: StatusCode,
    pub location: String,
    pub body: String,
    /// The cookies this answer set (name=value; an empty value removes one).
    pub set: Vec<String>,
}

impl Browser {
    /// A browser that fetches full URLs only.
    pub fn new() -> Browser {
        Browser::at("")
    }

    /// A browser whose paths are relative to `base` (e.g. `http://127.0.0.1:7480`).
    pub fn at(base: &str) -> Browser {
        Browser {
            http: reqwest::Client::builder()
                .redirect(Policy::none())
                .build()
                .unwrap(),
            base: base.to_owned(),
            cookies: BTreeMap::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        absolute(&self.base, path)
    }

    /// The `Cookie` header this browser sends (`None` without cookies), for requests a test
    /// builds by hand.
    pub fn cookie_header(&self) -> Option<String> {
        (!self.cookies.is_empty()).then(|| {
            self.cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join("; ")
        })
    }

    pub async fn answer(&mut self, request: reqwest::RequestBuilder) -> Page {
        let request = match self.cookie_header() {
            Some(header) => request.header(COOKIE, header),
            None => request,
        };
        let answer = request.send().await.expect("the server answers");
        let mut set = Vec::new();
        for value in answer.headers().get_all(SET_COOKIE) {
            let value = value.to_str().unwrap();
            let pair = value.split(';').next().unwrap().trim().to_owned();
            let (name, v) = pair.split_once('=').unwrap();
            let expired = value.contains("Max-Age=0") || value.contains("1970");
            if v.is_empty() || expired {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.to_owned(), v.to_owned());
            }
            set.push(pair);
        }
        Page {
            status: answer.status(),
            location: answer
                .headers()
                .get(LOCATION)
                .map(|l| l.to_str().unwrap().to_owned())
                .unwrap_or_default(),
            body: answer.text().await.unwrap(),
            set,
        }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let request = self.http.get(self.url(path));
        self.answer(request).await
    }

    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let request = self.http.post(self.url(path)).form(form);
        self.answer(request).await
    }

    /// Opens the page at `form_page` and posts `fields` to `action` with that page's CSRF token,
    /// as a person filling in the page's form does.
    pub async fn submit(
        &mut self,
        form_page: &str,
        action: &str,
        fields: &[(&str, String)],
    ) -> Page {
        let page = self.get(form_page).await;
        let token = csrf(&page.body);
        let mut form = vec![("csrf", token.as_str())];
        form.extend(fields.iter().map(|(k, v)| (*k, v.as_str())));
        self.post(action, &form).await
    }

    /// The insecure dev sign-in (`picketd dev`) as `principal` with `roles`.
    pub async fn dev_sign_in(&mut self, principal: &str, roles: &[&str]) {
        let mut form = vec![("principal", principal), ("next", "/console/")];
        form.extend(roles.iter().map(|r| (*r, "on")));
        let page = self.post("/console/signin", &form).await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
        assert_eq!(page.location, "/console/");
        assert!(self.cookie_header().is_some(), "signing in sets the cookie");
    }

    /// Follows `page`'s redirects (relative to `origin`) until one leads to a URL starting with
    /// `stop` (returned, not fetched) or a page that is not a redirect (`Err`).
    pub async fn follow(
        &mut self,
        mut page: Page,
        origin: &str,
        stop: &str,
    ) -> Result<String, Page> {
        for _ in 0..10 {
            if !page.status.is_redirection() {
                return Err(page);
            }
            let url = absolute(origin, &page.location);
            if url.starts_with(stop) {
                return Ok(url);
            }
            page = self.get(&url).await;
        }
        panic!("more than 10 redirects");
    }

    /// Begins an OpenID Connect sign-in at the console: the issuer's authorization URL it
    /// redirects to.
    pub async fn begin(&mut self, console: &str) -> String {
        let page = self
            .get(&format!("{console}/console/signin?next=/console/"))
            .await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.body);
        assert!(
            page.set
                .iter()
                .any(|c| c.starts_with("picket_console_oidc=")),
            "the pre-sign-in cookie: {:?}",
            page.set
        );
        page.location
    }

    /// Logs in at the provider from the authorization URL `authorize`: the console callback
    /// URL the provider redirects back to (with the code and state), not yet fetched.
    pub async fn log_in(
        &mut self,
        provider: &str,
        authorize: &str,
        console: &str,
        user: &str,
        password: &str,
    ) -> String {
        let first = self.get(authorize).await;
        let form = self
            .follow(first, provider, console)
            .await
            .expect_err("the provider shows its login form");
        assert_eq!(form.status, StatusCode::OK, "{}", form.body);
        let action = between(&form.body, "action=\"", "\"");
        let answer = self
            .post(
                &absolute(provider, &action),
                &[("login", user), ("password", password)],
            )
            .await;
        match self.follow(answer, provider, console).await {
            Ok(callback) => callback,
            Err(page) => panic!("the provider did not redirect back: {}", page.body),
        }
    }

    /// The whole OpenID Connect sign-in: the console's page after the callback.
    pub async fn sign_in(
        &mut self,
        provider: &str,
        console: &str,
        user: &str,
        password: &str,
    ) -> Page {
        let authorize = self.begin(console).await;
        let callback = self
            .log_in(provider, &authorize, console, user, password)
            .await;
        self.get(&callback).await
    }
}

/// `location` as a full URL: as it is when it is one, else relative to `origin`.
pub fn absolute(origin: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        location.to_owned()
    } else {
        format!("{origin}{location}")
    }
}

/// The text between the first `start` and the next `end` (`&amp;` read as `&`).
pub fn between(text: &str, start: &str, end: &str) -> String {
    let at = text
        .find(start)
        .unwrap_or_else(|| panic!("{start} in {text}"))
        + start.len();
    text[at..].split(end).next().unwrap().replace("&amp;", "&")
}

/// A query parameter of `url`.
pub fn param(url: &str, name: &str) -> String {
    reqwest::Url::parse(url)
        .unwrap()
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("no {name} in {url}"))
}

/// `url` with its query parameter `name` set to `value`.
pub fn with_param(url: &str, name: &str, value: &str) -> String {
    let mut parsed = reqwest::Url::parse(url).unwrap();
    let pairs: Vec<(String, String)> = parsed
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == name {
                value.to_owned()
            } else {
                v.into_owned()
            };
            (k.into_owned(), v)
        })
        .collect();
    parsed.query_pairs_mut().clear().extend_pairs(pairs);
    parsed.into()
}

/// The CSRF token a page's forms carry.
pub fn csrf(body: &str) -> String {
    between(body, "name=\"csrf\" value=\"", "\"")
}

/// The rule a refusal page names.
pub fn refused_rule(page: &Page) -> String {
    between(&page.body, "<code class=\"rule\">", "</code>")
}

/// Asserts that `page` is a refusal (403) naming `rule`.
#[track_caller]
pub fn assert_refused(page: &Page, rule: &str) {
    assert_eq!(page.status, StatusCode::FORBIDDEN, "{}", page.body);
    assert_eq!(refused_rule(page), rule, "{}", page.body);
}

/// Asserts that `page` answered 200 and shows `text`.
#[track_caller]
pub fn assert_shows(page: &Page, text: &str) {
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert!(page.body.contains(text), "no {text:?} in {}", page.body);
}
