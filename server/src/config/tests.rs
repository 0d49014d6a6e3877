use super::*;

const GOOD: &str = r#"
node_id = 2
data_dir = "data"
[[members]]
id = 1
peer_address = "127.0.0.1:7411"
client_address = "127.0.0.1:7401"
[[members]]
id = 2
peer_address = "127.0.0.1:7412"
client_address = "127.0.0.1:7402"
[[members]]
id = 3
peer_address = "127.0.0.1:7413"
client_address = "127.0.0.1:7403"
[timing]
election_timeout_ms_min = 100
election_timeout_ms_max = 200
heartbeat_ms = 20
"#;

/// What docs/operations.md says a join file may hold ("What a join file holds"), and what
/// `picketd check-config` then says the file's members mean.
#[test]
fn a_join_file_lists_itself_and_one_to_eight_contacts() {
    // Itself and one contact (node 3): valid, and said to be only whom to contact.
    let one = GOOD
        .replace("node_id = 2", "join = true\nnode_id = 2")
        .replacen(
            "[[members]]\nid = 1\npeer_address = \"127.0.0.1:7411\"\nclient_address = \"127.0.0.1:7401\"\n",
            "",
            1,
        );
    let config = Config::parse(&one).unwrap();
    assert_eq!(config.members.len(), 2);
    let said = config.members_meaning();
    assert!(
        said.starts_with("join = true: members 3 are only whom to contact"),
        "{said}"
    );
    // Itself alone: refused, naming the rule.
    let alone = one.replacen(
        "[[members]]\nid = 3\npeer_address = \"127.0.0.1:7413\"\nclient_address = \"127.0.0.1:7403\"\n",
        "",
        1,
    );
    let e = error_of(&alone);
    assert!(
        e.starts_with("members: a joining replica lists itself and 1 to 8 members"),
        "{e}"
    );
    // Its own entry is required (its addresses come from it).
    let e = error_of(&one.replace("node_id = 2", "node_id = 4"));
    assert!(e.starts_with("node_id: "), "{e}");
    // Without join: 3 or 5, the first membership, recorded with the addresses by --init.
    let first = Config::parse(GOOD).unwrap();
    assert!(first.members_meaning().contains("voters 1, 2, 3"));
    let m = first.membership_first();
    assert_eq!(m.voters.len(), 3);
    assert_eq!(m.addresses[2].peer, "127.0.0.1:7413");
    assert_eq!(m.validate(), Ok(()));
    let e = error_of(&alone.replace("join = true\n", ""));
    assert!(
        e.starts_with("members: a cluster has 3 or 5 members"),
        "{e}"
    );
}

#[test]
fn a_good_file_parses_with_defaults() {
    let config = Config::parse(GOOD).unwrap();
    assert_eq!(config.me().client_address, "127.0.0.1:7402");
    assert_eq!(config.cluster_id, "picket");
    assert_eq!(config.timing.heartbeat_ms, 20);
    assert_eq!(config.limits, Limits::default());
}

fn error_of(text: &str) -> String {
    Config::parse(text).unwrap_err().to_string()
}

/// The good file with `[storage]` `line`: its storage section, or the error.
fn storage_with(line: &str) -> Result<StorageSection, String> {
    let text = format!("{GOOD}\n[storage]\n{line}\n");
    Config::parse(&text)
        .map(|c| c.storage)
        .map_err(|e| e.to_string())
}

#[test]
fn a_backup_section_has_defaults_and_bounds() {
    assert_eq!(Config::parse(GOOD).unwrap().backup, None);
    let with = format!("{GOOD}[backup]\ndir = \"backups\"\n");
    let backup = Config::parse(&with).unwrap().backup.unwrap();
    assert_eq!((backup.interval_s, backup.keep), (3_600, 24));
    let e = error_of(&format!("{with}interval_s = 0\n"));
    assert!(e.starts_with("backup.interval_s: "), "{e}");
    let e = error_of(&format!("{with}keep = 0\n"));
    assert!(e.starts_with("backup.keep: "), "{e}");
    let e = error_of(&format!("{GOOD}[backup]\ndir = \"\"\n"));
    assert!(e.starts_with("backup.dir: "), "{e}");
}

#[test]
fn read_mode_picks_the_lease() {
    let plain = Config::parse(GOOD).unwrap();
    assert_eq!(plain.timing.read_mode, ReadMode::ReadIndex);
    assert_eq!(plain.timing.read_lease_ms(), 0);
    let text = GOOD.replace(
        "heartbeat_ms = 20",
        "heartbeat_ms = 20\nread_mode = \"lease\"",
    );
    let lease = Config::parse(&text).unwrap();
    assert_eq!(lease.timing.read_mode, ReadMode::Lease);
    assert_eq!(
        lease.timing.read_lease_ms(),
        lease.timing.election_timeout_ms_min
    );
    // The lease must outlast a heartbeat interval and its drift margin.
    let min = lease.timing.election_timeout_ms_min;
    let e = error_of(&text.replace("heartbeat_ms = 20", &format!("heartbeat_ms = {}", min - 2)));
    assert!(e.starts_with("timing.read_mode: "), "{e}");
    let e = error_of(&GOOD.replace(
        "heartbeat_ms = 20",
        "heartbeat_ms = 20\nread_mode = \"leases\"",
    ));
    assert!(e.contains("read_mode"), "{e}");
}

#[test]
fn errors_name_the_field() {
    let e = error_of(&GOOD.replace("node_id = 2", "node_id = 9"));
    assert!(e.starts_with("node_id: "), "{e}");
    let e = error_of(&GOOD.replace("127.0.0.1:7403", "nowhere"));
    assert!(e.starts_with("members[2].client_address: "), "{e}");
    let e = error_of(&GOOD.replace("heartbeat_ms = 20", "heartbeat_ms = 100"));
    assert!(e.starts_with("timing.election_timeout_ms_min: "), "{e}");
    let e = error_of(&GOOD.replace("id = 3", "id = 1"));
    assert!(e.starts_with("members[2].id: "), "{e}");
    let e = error_of(&format!("{GOOD}\n[sessions]\nttl_ms_default = 0\n"));
    assert!(e.contains("sessions.ttl_ms_default"), "{e}");
    let e = error_of(&format!("{GOOD}\n[force_releases]\nttl_ms = 10\n"));
    assert!(e.starts_with("force_releases.ttl_ms: "), "{e}");
    let e = error_of(&format!("{GOOD}\n[limits]\nwindow_slots = 65\n"));
    assert!(
        e.starts_with("limits.window_slots: must be at most 64"),
        "{e}"
    );
    let e = error_of(&format!("colour = 1\n{GOOD}"));
    assert!(e.contains("colour"), "{e}");
    let e = error_of(&GOOD.replace(
        "client_address = \"127.0.0.1:7403\"",
        "client_address = \"127.0.0.1:7403\"\nhttp_address = \"127.0.0.1\"",
    ));
    assert!(e.starts_with("members[2].http_address: "), "{e}");
    for bad in [
        "picket.internal:7480",
        "http://",
        "https://x/?a=1",
        "http://x/#k",
    ] {
        let e = error_of(&format!("external_url = {bad:?}\n{GOOD}"));
        assert!(e.starts_with("external_url: "), "{bad}: {e}");
    }
}

#[test]
fn the_persist_mode_is_inline_unless_the_thread_is_chosen() {
    let default = Config::parse(GOOD).unwrap().storage;
    assert_eq!(default.persist, PersistMode::Inline);
    let thread = storage_with("persist = \"thread\"").unwrap();
    assert_eq!(thread.persist, PersistMode::Thread);
    let e = storage_with("persist = \"async\"").unwrap_err();
    assert!(
        e.contains("storage.persist") || e.contains("persist"),
        "{e}"
    );
    assert!(e.contains("inline") && e.contains("thread"), "{e}");
}

#[test]
fn the_write_mode_is_fdatasync_unless_dsync_is_chosen() {
    let default = Config::parse(GOOD).unwrap().storage;
    assert_eq!(default.write_mode, WriteMode::Fdatasync);
    let dsync = storage_with("write_mode = \"dsync\"").unwrap();
    assert_eq!(dsync.write_mode, WriteMode::Dsync);
    let e = storage_with("write_mode = \"odirect\"").unwrap_err();
    assert!(e.contains("fdatasync") && e.contains("dsync"), "{e}");
}

#[test]
fn the_console_reads_alerts_only_from_a_configured_alertmanager_url() {
    assert_eq!(Config::parse(GOOD).unwrap().console.alertmanager_url, None);
    let with = format!("{GOOD}\n[console]\nalertmanager_url = \"http://127.0.0.1:9093\"\n");
    assert_eq!(
        Config::parse(&with)
            .unwrap()
            .console
            .alertmanager_url
            .as_deref(),
        Some("http://127.0.0.1:9093")
    );
    let e = error_of(&format!(
        "{GOOD}\n[console]\nalertmanager_url = \"am:9093\"\n"
    ));
    assert!(
        e.starts_with("console.alertmanager_url: `am:9093` must start with http://"),
        "{e}"
    );
    let e = error_of(&format!("{GOOD}\n[console]\nalertmanager = \"x\"\n"));
    assert!(e.contains("unknown field"), "{e}");
}

#[test]
fn the_console_certificate_goes_only_with_tls_and_the_oidc_sign_in() {
    const OIDC: &str = "[oidc]\nissuer = \"https://sso.test/realms/ops\"\n\
                        audiences = [\"picket\"]\n[oidc.console]\nclient_id = \"c\"\n";
    const CERT: &str = "[console]\nclient_cert = \"console.pem\"\nclient_key = \"console.key\"\n";
    let config = Config::parse(&format!("{GOOD}\n{MTLS}{OIDC}{CERT}")).unwrap();
    assert_eq!(
        config.console.client_cert.as_deref(),
        Some(Path::new("console.pem"))
    );
    assert!(!config.console_client_cert_missing());
    let without = Config::parse(&format!("{GOOD}\n{MTLS}{OIDC}")).unwrap();
    assert!(without.console_client_cert_missing());
    let plain_tls = MTLS.replace("require_client_cert = true", "");
    let config = Config::parse(&format!("{GOOD}\n{plain_tls}{OIDC}")).unwrap();
    assert!(
        !config.console_client_cert_missing(),
        "nothing asks for one"
    );
    for (text, rule) in [
        (
            format!("{GOOD}\n{MTLS}{OIDC}[console]\nclient_cert = \"c.pem\"\n"),
            "client_cert and client_key go together",
        ),
        (
            format!("{GOOD}\n{MTLS}{OIDC}[console]\nclient_key = \"c.key\"\n"),
            "client_cert and client_key go together",
        ),
        (format!("{GOOD}\n{OIDC}{CERT}"), "needs [tls]"),
        // Insecure dev auth or no auth: the certificate would be every person's identity.
        (
            format!("insecure_dev_auth = true\n{GOOD}\n{MTLS}{CERT}"),
            "needs [oidc.console]",
        ),
        (format!("{GOOD}\n{MTLS}{CERT}"), "needs [oidc.console]"),
    ] {
        let e = error_of(&text);
        assert!(e.starts_with("console.client_cert: "), "{e}");
        assert!(e.contains(rule), "{e}");
    }
    let mut config = Config::parse(&format!("{GOOD}\n{MTLS}{OIDC}{CERT}")).unwrap();
    config.resolve_paths(Path::new("/etc/picket"));
    assert_eq!(
        config.console.client_key.as_deref(),
        Some(Path::new("/etc/picket/console.key"))
    );
}

#[test]
fn http_addresses_and_the_external_url_default_sensibly() {
    // No HTTP at all: no addresses, no links.
    let config = Config::parse(GOOD).unwrap();
    assert_eq!(config.http_endpoints().len(), 0);
    assert_eq!(config.external_url(), None);
    // http_listen only: every member on the same port at its client host; the links on the
    // first member.
    let config = Config::parse(&format!("http_listen = \"0.0.0.0:7480\"\n{GOOD}")).unwrap();
    assert_eq!(config.http_endpoints()[&3], "http://127.0.0.1:7480");
    assert_eq!(
        config.external_url().as_deref(),
        Some("http://127.0.0.1:7480")
    );
    // An explicit member address wins; an explicit external_url loses its trailing slash.
    let text = format!(
        "external_url = \"https://picket.example.com/\"\nhttp_listen = \"0.0.0.0:7480\"\n{}",
        GOOD.replace(
            "client_address = \"127.0.0.1:7401\"",
            "client_address = \"127.0.0.1:7401\"\nhttp_address = \"10.1.1.1:8080\"",
        )
    );
    let config = Config::parse(&text).unwrap();
    assert_eq!(config.http_endpoints()[&1], "http://10.1.1.1:8080");
    assert_eq!(config.http_endpoints()[&2], "http://127.0.0.1:7480");
    assert_eq!(
        config.external_url().as_deref(),
        Some("https://picket.example.com")
    );
}

const MTLS: &str = "[tls]\ncert = \"n.pem\"\nkey = \"n.key\"\nca = \"ca.pem\"\n\
                    require_client_cert = true\n";

#[test]
fn certificate_roles_and_principal_sources_are_checked() {
    let config = Config::parse(&format!("{GOOD}\n{MTLS}")).unwrap();
    let certs = config.certificate_auth().unwrap().unwrap();
    assert_eq!(
        certs.principal_from,
        vec![
            crate::auth::PrincipalSource::SanUri,
            crate::auth::PrincipalSource::SanDns,
            crate::auth::PrincipalSource::Cn
        ]
    );
    let anyone = certs.caller_named("svc".into());
    assert!(anyone.lock_roles.allows(Some("orders")) && anyone.roles.is_empty());
    let text = format!(
        "{GOOD}\n{MTLS}client_principal_from = \"cn\"\n[auth]\ncertificate_roles = \
         [\"picket-client:orders\"]\n[auth.certificate_principal_roles]\n\
         alice = [\"picket-operator\"]\n"
    );
    let certs = Config::parse(&text)
        .unwrap()
        .certificate_auth()
        .unwrap()
        .unwrap();
    assert_eq!(certs.principal_from, vec![crate::auth::PrincipalSource::Cn]);
    let alice = certs.caller_named("alice".into());
    assert!(alice.lock_roles.allows(Some("orders")));
    assert!(!alice.lock_roles.allows(Some("billing")));
    assert!(alice
        .require(&[picket_core::locks::Role::OnCall], None)
        .is_ok());
    let bob = certs.caller_named("bob".into());
    assert!(bob
        .require(&[picket_core::locks::Role::OnCall], None)
        .is_err());
    let e = error_of(&format!(
        "{GOOD}\n{MTLS}[auth]\ncertificate_roles = [\"picket-clients\"]\n"
    ));
    assert!(
        e.starts_with("auth.certificate_roles: unknown role `picket-clients`"),
        "{e}"
    );
    let e = error_of(&format!(
        "{GOOD}\n{MTLS}client_principal_from = \"email\"\n"
    ));
    assert!(e.contains("client_principal_from"), "{e}");
    // Without client certificates there is nothing to configure.
    let plain = Config::parse(GOOD).unwrap();
    assert_eq!(plain.certificate_auth(), Ok(None));
}

mod example_tests {
    use super::*;

    #[test]
    fn the_shipped_example_is_valid() {
        let config = Config::parse(include_str!("../../picket.example.toml")).unwrap();
        assert_eq!(config.members.len(), 3);
        assert_eq!(config.scheme(), "https");
        assert_eq!(config.client_listen, Some("0.0.0.0:7401".parse().unwrap()));
        assert_eq!(
            config.external_url().as_deref(),
            Some("https://picket.internal:7480")
        );
        // `[tls] http = true`: the HTTP port serves HTTPS, so its links and hints say so.
        assert_eq!(
            config.http_endpoints()[&2],
            "https://picket-2.internal:7480"
        );
    }
}
