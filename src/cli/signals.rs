//! SIGINT/SIGTERM start a graceful stop, a second one exits at once; SIGHUP reopens
//! the log file and the audit trail for logrotate. One plain thread, no async
//! runtime.

use crossbeam_channel::{bounded, Receiver};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::hosts::audit::AuditLog;
use crate::logging::LogHandle;

/// The audit trail, once the daemon has opened it.
pub type AuditSlot = Arc<Mutex<Option<Arc<AuditLog>>>>;

/// Installs the handlers and returns a receiver that disconnects (every `recv`
/// returns `Err`) when the daemon should stop.
pub fn install(log: LogHandle, audit: AuditSlot) -> std::io::Result<Receiver<()>> {
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
                        let audit = audit.lock().clone();
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
