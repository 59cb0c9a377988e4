//! Provisioner YAML configuration.
