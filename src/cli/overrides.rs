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
