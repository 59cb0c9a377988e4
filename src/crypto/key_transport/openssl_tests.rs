//! Go's legacy PEM encryption interoperates with OpenSSL: OpenSSL decrypts what we
//! encrypt (`openssl rsa -passin`), with the same EVP_BytesToKey derivation.

use std::process::Command;

use crate::crypto::{key_transport as crypto, pem};

fn openssl(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn openssl_decrypts_a_key_we_encrypted() {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("SKIP: the openssl command is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("pem-openssl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    assert!(
        openssl(&dir, &["genrsa", "-traditional", "-out", "key.pem", "2048"])
            .status
            .success()
    );
    let clear = std::fs::read_to_string(dir.join("key.pem")).unwrap();
    let block = pem::decode(&clear).unwrap();
    assert_eq!(block.label, "RSA PRIVATE KEY");
    let password = b"choria-test-password";
    let iv = [0x5a; 16];
    std::fs::write(
        dir.join("enc.pem"),
        crypto::encrypt_pem_block(&block.der, password, iv),
    )
    .unwrap();
    let modulus = |file: &str, pass: Option<&str>| {
        let mut args = vec!["rsa", "-in", file, "-noout", "-modulus"];
        let pass = pass.map(|p| format!("pass:{p}"));
        if let Some(p) = &pass {
            args.extend(["-passin", p.as_str()]);
        }
        let out = openssl(&dir, &args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        modulus("enc.pem", Some("choria-test-password")),
        modulus("key.pem", None),
        "OpenSSL decrypts our PEM to the same key"
    );
    let wrong = openssl(
        &dir,
        &["rsa", "-in", "enc.pem", "-noout", "-passin", "pass:wrong"],
    );
    assert!(!wrong.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}
