//! The provisioner against a Choria broker's rules (`tests/support/broker.rs` in front
//! of a real nats-server): the CONNECT go-choria sends per security provider is let
//! in, every credential problem is refused by the broker and reported by us, a
//! reconnect signs its new nonce, and `check` says what it found without a secret.
#![cfg(feature = "sim")]
#![allow(deprecated)] // the synchronous nats client is marked deprecated upstream

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use choria_provisioner::choria::client_config::ClientConfig;
use choria_provisioner::choria::connector::{ConnectAttemptError, Connector};
use choria_provisioner::config::Config;
use choria_provisioner::crypto::ids;
use choria_provisioner::crypto::jwt::SigningKey;
use choria_provisioner::metrics::Metrics;
use choria_provisioner::sim::keygen::ed25519_public_hex;
use crossbeam_channel::bounded;
use support::broker::{ChoriaBroker, Landing, Network, PROVISIONING_PASSWORD};
use support::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_choria-provisioner");

/// The provisioner's configuration for `rig`: choria.cfg with the keys' security
/// lines (after `edit`), the YAML with the rig's password (or `password`).
struct Setup {
    _dir: TempDir,
    cfg: PathBuf,
    yaml: PathBuf,
}

impl Setup {
    fn new(rig: &ChoriaBroker, password: &str, edit: impl Fn(String) -> String) -> Setup {
        Setup::with_url(rig, &rig.url(), password, edit)
    }

    fn with_url(
        rig: &ChoriaBroker,
        url: &str,
        password: &str,
        edit: impl Fn(String) -> String,
    ) -> Setup {
        let dir = TempDir::new("broker-auth");
        let (cfg, yaml) = rig.write_provisioner(
            &dir,
            "provisioner.test.local",
            url,
            &edit(rig.choria_cfg()),
            "",
        );
        let text = std::fs::read_to_string(&yaml).unwrap();
        std::fs::write(&yaml, text.replace(PROVISIONING_PASSWORD, password)).unwrap();
        Setup {
            _dir: dir,
            cfg,
            yaml,
        }
    }

    fn client(&self) -> ClientConfig {
        let config = Config::load(&self.yaml).unwrap().config;
        let mut client = ClientConfig::load(&self.cfg).unwrap();
        choria_provisioner::cli::apply_provisioner_overrides(&mut client, &config);
        client
    }

    /// `choria-provisioner check`: (exit code, stdout, stderr).
    fn check(&self) -> (i32, String, String) {
        let o = Command::new(BIN)
            .args(["check", "--config"])
            .arg(&self.yaml)
            .arg("--choria-config")
            .arg(&self.cfg)
            .output()
            .expect("run check");
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }
}

fn metrics() -> Arc<Metrics> {
    Arc::new(Metrics::new("t").unwrap())
}

/// A message published through the connection comes back through it.
fn round_trip(conn: &Connector, subject: &str) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let filter = choria_provisioner::choria::subject::SubjectFilter::new(subject).unwrap();
    let _sub = conn
        .bus()
        .subscribe(&filter, None, move |m| {
            let _ = tx.send(m.data);
        })
        .unwrap();
    let subject = choria_provisioner::choria::subject::Subject::new(subject).unwrap();
    conn.bus().publish(&subject, b"through the broker").unwrap();
    let data = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("relayed both ways");
    assert_eq!(data, b"through the broker");
}

fn wait_until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

fn seed_of(rig: &ChoriaBroker, name: &str) -> [u8; 32] {
    let hex = std::fs::read_to_string(rig.path(name)).unwrap();
    hex::decode(hex.trim()).unwrap().try_into().unwrap()
}

/// A client JWT signed by the rig's issuer for the signer's key, with `claims` merged in.
fn client_jwt(rig: &ChoriaBroker, claims: serde_json::Value) -> String {
    let now = choria_provisioner::clock::unix_now() as i64;
    let issuer = seed_of(rig, "issuer.seed");
    let public = std::fs::read_to_string(rig.path("signer.public")).unwrap();
    let mut all = serde_json::json!({
        "callerid": "choria=provisioner",
        "ou": "choria",
        "permissions": {"provisioner": true, "streams_user": true, "election_user": true},
        "purpose": "choria_client_id",
        "public_key": public.trim(),
        "iss": format!("I-{}", ed25519_public_hex(&issuer)),
        "exp": now + 3600,
        "nbf": now - 60,
        "iat": now - 60,
        "jti": ids::ksuid(),
    });
    for (k, v) in claims.as_object().unwrap() {
        all[k] = v.clone();
    }
    SigningKey::from_ed25519_seed(&issuer)
        .sign_jwt(&all)
        .unwrap()
}

/// `cfg` with the value of `key` replaced by `value`.
fn set(cfg: &str, key: &str, value: &std::path::Path) -> String {
    cfg.lines()
        .map(|l| match l.split_once(" = ") {
            Some((k, _)) if k == key => format!("{key} = {}\n", value.display()),
            _ => format!("{l}\n"),
        })
        .collect()
}

/// The keys' choria.cfg lines with the token file replaced by `token`.
fn with_token(setup_dir: &TempDir, token: &str) -> impl Fn(String) -> String {
    let path = setup_dir.write("client.jwt", token);
    move |cfg: String| set(&cfg, "plugin.security.choria.token_file", &path)
}

/// Drops the client certificate lines: only the JWT can let us in.
fn without_certificate(cfg: String) -> String {
    cfg.lines()
        .filter(|l| {
            !l.starts_with("plugin.security.choria.certificate")
                && !l.starts_with("plugin.security.choria.key")
        })
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Checks that the broker front end's first refusal says `text`.
fn first_refusal_says(rig: &ChoriaBroker, text: &str) {
    let refusals = rig.front.refusals();
    assert!(
        refusals.first().is_some_and(|r| r.contains(text)),
        "{refusals:?}"
    );
}

fn refused(result: Result<Connector, ConnectAttemptError>) -> (String, String) {
    match result {
        Err(ConnectAttemptError::Refused { broker, report }) => (broker, report),
        Err(other) => panic!("not a refusal by the broker: {other}"),
        Ok(_) => panic!("the broker let it in"),
    }
}

#[test]
fn v1_file_provider_and_password_get_in_through_verified_mutual_tls() {
    let rig = ChoriaBroker::start(Network::MutualTls);
    let setup = Setup::new(&rig, PROVISIONING_PASSWORD, |c| c);
    let client = setup.client();
    assert!(client.validate().is_empty(), "{:?}", client.validate());
    let conn = Connector::connect_once(&client, &metrics()).expect("let in");
    round_trip(&conn, "provisioning.reply.v1test");
    let admitted = rig.front.admitted();
    assert_eq!(admitted.len(), 1, "{admitted:?}");
    let a = &admitted[0];
    assert_eq!(
        (a.user.as_str(), a.landing),
        ("provisioner", Landing::Provisioner)
    );
    assert!(
        a.tls_verified,
        "the client certificate was presented and verified"
    );
    assert!(
        !a.signed,
        "no JWT, no nonce signature with the file provider"
    );
    conn.close(Duration::from_secs(2));

    // The same password without a client certificate: no verified TLS, refused.
    let no_cert = Setup::new(&rig, PROVISIONING_PASSWORD, |cfg| {
        cfg.lines()
            .filter(|l| l.starts_with("plugin.security.provider") || l.contains(".ca ="))
            .map(|l| format!("{l}\n"))
            .collect()
    });
    let (broker, report) = refused(Connector::connect_once(&no_cert.client(), &metrics()));
    assert_eq!(broker, "Authorization Violation");
    assert!(report.contains("verifies against its CA"), "{report}");
    assert!(
        rig.front
            .refusals()
            .iter()
            .any(|r| r == "provisioning user is only allowed over verified TLS connections"),
        "{:?}",
        rig.front.refusals()
    );
}

#[test]
fn v2_choria_provider_and_password_get_in_through_the_issuer_with_a_signed_nonce() {
    let rig = ChoriaBroker::start(Network::Issuer);
    // Without a client certificate: only the issuer's JWT can let it in.
    let setup = Setup::new(&rig, PROVISIONING_PASSWORD, without_certificate);
    let conn = Connector::connect_once(&setup.client(), &metrics()).expect("let in");
    round_trip(&conn, "provisioning.reply.v2test");
    let admitted = rig.front.admitted();
    let a = &admitted[0];
    assert_eq!(
        (a.user.as_str(), a.landing),
        ("provisioner", Landing::Provisioner)
    );
    assert!(!a.tls_verified);
    assert!(a.signed, "sig sent and verified with the JWT's public key");
    assert_eq!(a.caller, "provisioner_signer");
    conn.close(Duration::from_secs(2));

    // check on the configuration `choria-fleet-sim keys --v2` writes: clean.
    let (code, out, err) = setup.check();
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!err.contains("warning"), "{err}");
    assert!(out.contains("caller_id: provisioner_signer"), "{out}");
    assert!(
        out.contains(
            "permissions: streams_user, election_user, fleet_management, service, provisioner"
        ),
        "{out}"
    );
    assert!(out.contains("client_jwt_expires: "), "{out}");
}

#[test]
fn without_a_ca_the_choria_provider_does_tls_without_verifying_the_broker_as_go_does() {
    let rig = ChoriaBroker::start(Network::Issuer);
    let setup = Setup::new(&rig, PROVISIONING_PASSWORD, |cfg| {
        without_certificate(cfg)
            .lines()
            .filter(|l| !l.starts_with("plugin.security.choria.ca"))
            .map(|l| format!("{l}\n"))
            .collect()
    });
    let client = setup.client();
    assert!(client.tls_files().unwrap().ca.is_none());
    let conn = Connector::connect_once(&client, &metrics()).expect("let in over TLS");
    round_trip(&conn, "provisioning.reply.noca");
    assert!(rig.front.admitted()[0].signed);
}

#[test]
fn a_client_jwt_issued_through_a_chain_issuer_gets_in() {
    let rig = ChoriaBroker::start(Network::Issuer);
    let scratch = TempDir::new("chain");
    // The keys' signer token is a chain issuer the organisation issuer vouched for;
    // it issues a client JWT for a key of its own (choria-io/tokens).
    let chain: serde_json::Value = choria_provisioner::crypto::jwt::unverified_claims(
        std::fs::read_to_string(rig.path("signer.jwt"))
            .unwrap()
            .trim(),
    )
    .unwrap();
    let (chain_jti, chain_tcs, chain_public) = (
        chain["jti"].as_str().unwrap(),
        chain["tcs"].as_str().unwrap(),
        chain["public_key"].as_str().unwrap(),
    );
    let seed = [5u8; 32];
    let signer_seed = seed_of(&rig, "signer.seed");
    // `tcs_seed` signs the chain link: the chain issuer's seed, or another one.
    let issue = |tcs_seed: &[u8; 32]| {
        let jti = ids::ksuid();
        let iat = ids::ksuid_time(&jti).unwrap() as i64;
        let chain_sig = ring::signature::Ed25519KeyPair::from_seed_unchecked(tcs_seed)
            .unwrap()
            .sign(format!("{jti}.{chain_tcs}").as_bytes());
        let claims = serde_json::json!({
            "callerid": "choria=chained",
            "ou": "choria",
            "permissions": {"provisioner": true},
            "purpose": "choria_client_id",
            "tcs": format!("{chain_tcs}.{}", hex::encode(chain_sig.as_ref())),
            "public_key": ed25519_public_hex(&seed),
            "issexp": chain["exp"],
            "iss": format!("C-{chain_jti}.{chain_public}"),
            "exp": iat + 3600,
            "nbf": iat,
            "iat": iat,
            "jti": jti,
        });
        SigningKey::from_ed25519_seed(&signer_seed)
            .sign_jwt(&claims)
            .unwrap()
    };
    let seed_file = scratch.write("chained.seed", &hex::encode(seed));
    let client = |token: &str| {
        Setup::new(&rig, PROVISIONING_PASSWORD, |cfg| {
            set(
                &without_certificate(with_token(&scratch, token)(cfg)),
                "plugin.security.choria.seed_file",
                &seed_file,
            )
        })
        .client()
    };
    let conn = Connector::connect_once(&client(&issue(&signer_seed)), &metrics()).expect("let in");
    round_trip(&conn, "provisioning.reply.chain");
    let a = &rig.front.admitted()[0];
    assert_eq!((a.caller.as_str(), a.signed), ("choria=chained", true));
    // A chain link the chain issuer did not sign is refused.
    let forged = issue(&[6u8; 32]);
    refused(Connector::connect_once(&client(&forged), &metrics()));
    first_refusal_says(&rig, "the chain issuer did not sign this token");
}

#[test]
fn a_jwt_without_the_provisioner_permission_is_refused_and_we_say_so() {
    let rig = ChoriaBroker::start(Network::Issuer);
    let scratch = TempDir::new("perm");
    let token = client_jwt(
        &rig,
        serde_json::json!({"permissions": {"server_provisioner": true, "streams_user": true}}),
    );
    let setup = Setup::new(&rig, PROVISIONING_PASSWORD, |cfg| {
        without_certificate(with_token(&scratch, &token)(cfg))
    });
    let (broker, report) = refused(Connector::connect_once(&setup.client(), &metrics()));
    assert_eq!(broker, "Authorization Violation");
    assert!(
        report.contains("lacks the provisioner permission"),
        "{report}"
    );
    first_refusal_says(
        &rig,
        "provisioner claim is false in token with caller id 'choria=provisioner'",
    );
    let (code, out, err) = setup.check();
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("lacks the provisioner permission"), "{err}");

    // With a client certificate, a broker without an issuer would still let it in:
    // check warns instead.
    let with_cert = Setup::new(&rig, PROVISIONING_PASSWORD, with_token(&scratch, &token));
    let (code, out, err) = with_cert.check();
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("warning:") && err.contains("lacks the provisioner permission"),
        "{err}"
    );
    assert!(
        out.contains("permissions: server_provisioner, streams_user"),
        "{out}"
    );
}

#[test]
fn an_expired_jwt_is_not_sent_by_us_and_refused_by_the_broker() {
    let rig = ChoriaBroker::start(Network::Issuer);
    let scratch = TempDir::new("expired");
    let now = choria_provisioner::clock::unix_now() as i64;
    let token = client_jwt(&rig, serde_json::json!({"exp": now - 5}));
    let setup = Setup::new(&rig, PROVISIONING_PASSWORD, |cfg| {
        without_certificate(with_token(&scratch, &token)(cfg))
    });
    // As go-choria's client: no CONNECT with an expired token.
    match Connector::connect_once(&setup.client(), &metrics()) {
        Err(ConnectAttemptError::Failed(e)) => assert!(e.contains("has expired"), "{e}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected with an expired JWT"),
    }
    assert!(rig.front.admitted().is_empty() && rig.front.refusals().is_empty());
    let (code, _, err) = setup.check();
    assert_eq!(code, 1);
    assert!(err.contains("expired at"), "{err}");

    // The broker refuses it too: sent by a bare client with a correct signature.
    let signer = seed_of(&rig, "signer.seed");
    let jwt = token.clone();
    let result = nats::Options::with_connect_credentials(move |nonce| {
        let key = ring::signature::Ed25519KeyPair::from_seed_unchecked(&signer).unwrap();
        Ok(nats::ConnectCredentials {
            user: Some("provisioner".into()),
            pass: Some(PROVISIONING_PASSWORD.into()),
            auth_token: Some(jwt.clone()),
            jwt: Some(jwt.clone()),
            sig: Some(URL_SAFE_NO_PAD.encode(key.sign(nonce).as_ref())),
        })
    })
    .tls_required(true)
    .add_root_certificate(rig.path("ca.pem"))
    .connect(rig.url());
    let e = result.expect_err("refused");
    assert!(e.to_string().contains("Authorization Violation"), "{e}");
    first_refusal_says(&rig, "expired");
}

#[test]
fn a_wrong_password_is_refused_and_we_say_what_the_broker_checks() {
    let rig = ChoriaBroker::start(Network::Issuer);
    let setup = Setup::new(&rig, "not-the-password", without_certificate);
    let (broker, report) = refused(Connector::connect_once(&setup.client(), &metrics()));
    assert_eq!(broker, "Authorization Violation");
    assert!(
        report.contains("user provisioner with a password")
            && report.contains("plugin.choria.network.provisioning.client_password"),
        "{report}"
    );
    assert!(
        !report.contains("not-the-password"),
        "no password in the report"
    );
    assert_eq!(
        rig.front.refusals(),
        ["invalid provisioner password supplied"]
    );
}

#[test]
fn a_wrong_seed_is_refused_and_we_say_so() {
    let rig = ChoriaBroker::start(Network::Issuer);
    let scratch = TempDir::new("seed");
    let other = scratch.write("other.seed", &hex::encode([9u8; 32]));
    let setup = Setup::new(&rig, PROVISIONING_PASSWORD, |cfg| {
        set(
            &without_certificate(cfg),
            "plugin.security.choria.seed_file",
            &other,
        )
    });
    let (broker, report) = refused(Connector::connect_once(&setup.client(), &metrics()));
    assert_eq!(broker, "Authorization Violation");
    assert!(report.contains("not the private half"), "{report}");
    assert_eq!(
        rig.front.refusals(),
        ["nonce signature did not verify using pub key in the jwt"]
    );
    let (code, _, err) = setup.check();
    assert_eq!(code, 1);
    assert!(err.contains("plugin.security.choria.seed_file"), "{err}");
    assert!(err.contains("not the private half"), "{err}");
}

#[test]
fn a_reconnect_signs_the_new_nonce() {
    let rig = ChoriaBroker::start(Network::Issuer);
    let setup = Setup::new(&rig, PROVISIONING_PASSWORD, without_certificate);
    let m = metrics();
    let (_stop, shutdown) = bounded::<()>(0);
    let conn = Connector::connect(&setup.client(), &m, &shutdown).expect("connects");
    round_trip(&conn, "provisioning.reply.before");
    rig.front.drop_connections();
    assert!(
        wait_until(Duration::from_secs(15), || rig.front.admitted().len() == 2
            && conn.is_connected()),
        "reconnected through the front end: {:?} {:?}",
        rig.front.admitted(),
        rig.front.refusals()
    );
    let admitted = rig.front.admitted();
    assert_ne!(admitted[0].nonce, admitted[1].nonce, "a new nonce");
    assert!(
        admitted.iter().all(|a| a.signed),
        "each nonce signed and verified"
    );
    assert!(
        rig.front.refusals().is_empty(),
        "{:?}",
        rig.front.refusals()
    );
    round_trip(&conn, "provisioning.reply.after");
    assert_eq!(
        m.connector_reconnections
            .with_label_values(&["provisioner.test.local"])
            .get(),
        1
    );
    conn.close(Duration::from_secs(2));
}

#[test]
fn check_shows_brokers_caller_and_permissions_and_no_password() {
    let rig = ChoriaBroker::start(Network::Issuer);
    let url = rig.url().replace(
        "nats://",
        &format!("nats://provisioner:{PROVISIONING_PASSWORD}@"),
    );
    let setup = Setup::with_url(&rig, &url, "yaml-pa55word", |c| c);
    let (code, out, err) = setup.check();
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains(&format!("brokers: {}", rig.url())), "{out}");
    assert!(out.contains("nats_user: provisioner"), "{out}");
    assert!(out.contains("caller_id: provisioner_signer"), "{out}");
    let all = format!("{out}{err}");
    for secret in [PROVISIONING_PASSWORD, "yaml-pa55word", "s3cret-token"] {
        assert!(!all.contains(secret), "{secret} in check output:\n{all}");
    }
    let token = std::fs::read_to_string(rig.path("signer.jwt")).unwrap();
    assert!(
        !all.contains(token.trim()),
        "the client JWT in check output"
    );
    let seed = std::fs::read_to_string(rig.path("signer.seed")).unwrap();
    assert!(!all.contains(seed.trim()), "the seed in check output");

    // The password written into the URL is the one sent, in place of the YAML's.
    let conn = Connector::connect_once(&setup.client(), &metrics()).expect("let in");
    round_trip(&conn, "provisioning.reply.url");
    assert!(
        rig.front.refusals().is_empty(),
        "{:?}",
        rig.front.refusals()
    );
}

/// `check` says how the instances of a site will sign and check what they tell each
/// other, and fails as `run` would when they cannot.
#[test]
fn check_says_how_peer_messages_are_signed_and_fails_when_they_cannot_be() {
    let shared = |setup: &Setup| {
        let text = std::fs::read_to_string(&setup.yaml).unwrap();
        std::fs::write(
            &setup.yaml,
            format!("{text}active_active: true\nsite: lon\n"),
        )
        .unwrap();
    };
    let tls = ChoriaBroker::start(Network::MutualTls);
    let setup = Setup::new(&tls, PROVISIONING_PASSWORD, |c| c);
    shared(&setup);
    let (code, out, err) = setup.check();
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains(
            "peer_messages: signed with this instance's certificate; a peer's believed when \
             the CA bundle vouches for its certificate and its name matches ^provisioner\\.test\\.local$"
        ),
        "{out}"
    );
    let issuer = ChoriaBroker::start(Network::Issuer);
    let setup = Setup::new(&issuer, PROVISIONING_PASSWORD, |c| c);
    shared(&setup);
    let (code, out, err) = setup.check();
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("peer_messages: signed with this instance's seed and client JWT"),
        "{out}"
    );
    // Without the issuer's public key nothing could be checked: run would refuse.
    let setup = Setup::new(&issuer, PROVISIONING_PASSWORD, |c| {
        c.lines()
            .filter(|l| !l.starts_with("plugin.security.issuer."))
            .map(|l| format!("{l}\n"))
            .collect()
    });
    shared(&setup);
    let (code, out, err) = setup.check();
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        err.contains("no organisation issuer is configured"),
        "{err}"
    );
}
