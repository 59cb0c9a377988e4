//! SIGINT/SIGTERM start a graceful stop, a second one exits at once; SIGHUP reopens
//! the log file and the audit trail for logrotate and loads the key files again. One
//! plain thread, no async runtime.

use crossbeam_channel::{bounded, Receiver};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::fleet::audit::AuditLog;
use crate::fleet::daemon::KeyReloader;
use crate::logging::LogHandle;

/// What SIGHUP reloads besides the log file, once the daemon has started.
#[derive(Default)]
pub(crate) struct Reloadable {
    /// The audit trail, when `audit_file` is set.
    pub audit: Option<Arc<AuditLog>>,
    /// The key files the features loaded.
    pub keys: Option<KeyReloader>,
}

/// The daemon's [`Reloadable`], filled in once it has started.
pub(crate) type ReloadSlot = Arc<Mutex<Reloadable>>;

/// Installs the handlers and returns a receiver that disconnects (every `recv`
/// returns `Err`) when the daemon should stop.
pub(crate) fn install(log: LogHandle, reload: ReloadSlot) -> std::io::Result<Receiver<()>> {
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let (tx, rx) = bounded::<()>(0);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut stop = Some(tx);
            for signal in signals.forever() {
                match signal {
                    SIGHUP => {
                        match log.reopen() {
                            Ok(()) => log::info!("Reopened the log file on SIGHUP"),
                            Err(e) => log::error!("Could not reopen the log file on SIGHUP: {e}"),
                        }
                        let (audit, keys) = {
                            let slot = reload.lock();
                            (slot.audit.clone(), slot.keys.clone())
                        };
                        if let Some(keys) = keys {
                            keys.reload();
                        }
                        if let Some(audit) = audit {
                            match audit.reopen() {
                                Ok(()) => log::info!(
                                    "Reopened the audit file {} on SIGHUP",
                                    audit.path().display()
                                ),
                                Err(e) => {
                                    audit.reopen_failed();
                                    log::error!(
                                        "Could not reopen the audit file {} on SIGHUP: {e}",
                                        audit.path().display()
                                    )
                                }
                            }
                        }
                    }
                    _ if stop.is_some() => {
                        log::warn!(
                            "Shutting down on signal {signal}; a second signal exits at once"
                        );
                        stop = None;
                    }
                    _ => {
                        log::error!("Exiting at once on a second signal {signal}");
                        eprintln!("choria-provisioner: exiting at once on a second signal");
                        std::process::exit(1);
                    }
                }
            }
        })?;
    Ok(rx)
}
