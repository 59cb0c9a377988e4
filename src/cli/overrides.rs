//! What the provisioner overrides in its Choria client configuration, whatever
//! choria.cfg says (`cmd/provisioner.go:61-79`): the provisioning collective,
//! insecure mode, and the provisioning broker account. Here, not in `choria`, because
//! these are the provisioner's rules, not the wire's.

use crate::choria::client_config::{ClientConfig, SecurityProvider};
use crate::config::Config;

/// Applies the provisioner's overrides from `config` to `client`.
pub fn apply_provisioner_overrides(client: &mut ClientConfig, config: &Config) {
    client.collectives = vec!["provisioning".into()];
    client.main_collective = "provisioning".into();
    if config.choria_insecure {
        client.insecure = true;
        client.security_provider = SecurityProvider::File;
    }
    if !config.broker_provisioning_password.is_empty() {
        client.nats_user = crate::choria::client_jwt::PROVISIONER_USER.into();
        client.nats_pass = config.broker_provisioning_password.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choria::client_config::SecurityProvider;
    use crate::test_nats_server::TempDir;

    #[test]
    fn provisioner_overrides_apply() {
        let dir = TempDir::new("ccfg");
        let path = dir.write(
            "choria.cfg",
            "identity = p.example.net\ncollectives = mcollective,other\nplugin.choria.middleware_hosts = 127.0.0.1:4222\nplugin.nats.user = u\nplugin.nats.pass = p\n",
        );
        let helper = dir.script("helper", "#!/bin/sh\n");
        let yaml = dir.write(
            "p.yaml",
            &format!(
                "helper: {}\nchoria_insecure: true\nbroker_provisioning_password: s3cret\n",
                helper.display()
            ),
        );
        let config = Config::load(&yaml).unwrap().config;
        let mut c = ClientConfig::load(&path).unwrap();
        assert_eq!(c.collectives, ["mcollective", "other"]);
        assert_eq!(
            c.security_provider,
            SecurityProvider::Puppet,
            "go-choria's default"
        );
        apply_provisioner_overrides(&mut c, &config);
        assert_eq!(c.collectives, ["provisioning"]);
        assert_eq!(c.main_collective, "provisioning");
        assert_eq!(c.security_provider, SecurityProvider::File);
        assert!(c.insecure);
        assert_eq!(c.tls_files(), None, "insecure means no TLS");
        assert_eq!(c.nats_user, "provisioner");
        assert_eq!(c.nats_pass.expose(), "s3cret");
        assert!(c.validate().is_empty(), "{:?}", c.validate());
        assert!(
            !format!("{c:?}").contains("s3cret"),
            "secrets never in Debug"
        );
    }
}
