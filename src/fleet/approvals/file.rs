//! The approval file (`approval_file`, or `approvals.json` beside `pause_file`):
//! every record of the table as one JSON document, `{"records": [...]}`, in the
//! same form instances send one another. Written whole to a temporary file,
//! flushed to disk, then renamed into place, so a crash leaves the old file or the
//! new one, never half of one.
//!
//! A file that cannot be read or decoded is moved aside (`.unreadable-<unix>`) and
//! the daemon starts with an empty table: every node then waits for a decision
//! again, which is the safe side (nothing denied is let in, nothing is approved
//! that was not), and the operator's decisions are still in the moved file.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::choria::peers::{ApprovalRecord, RecordWire};

/// The largest approval file read: the most records a table keeps, each of the
/// largest size, with room to spare.
const MAX_FILE: u64 = 512 * 1024 * 1024;

#[derive(Serialize, Deserialize)]
struct FileWire {
    records: Vec<RecordWire>,
}

/// The approval file could not be read, decoded or written.
#[derive(Debug, thiserror::Error)]
#[error("could not {what} the approval file {}: {error}", .path.display())]
pub(crate) struct ApprovalFileError {
    path: PathBuf,
    what: &'static str,
    error: String,
}

/// What a load found.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    /// The valid records.
    pub records: Vec<ApprovalRecord>,
    /// Records refused (a bad identity, a string too long).
    pub refused: usize,
}

/// Reads `path`: `Ok` with no records when it does not exist yet.
pub(crate) fn load(path: &Path) -> Result<Loaded, ApprovalFileError> {
    let fail = |what, error: String| ApprovalFileError {
        path: path.to_path_buf(),
        what,
        error,
    };
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(e) => return Err(fail("read", e.to_string())),
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail("read", e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(fail("read", format!("it is larger than {MAX_FILE} bytes")));
    }
    let wire: FileWire = serde_json::from_slice(&bytes)
        .map_err(|e| fail("decode", crate::json_text::describe(&e).to_string()))?;
    let mut loaded = Loaded::default();
    for record in wire.records {
        match record.check() {
            Ok(r) => loaded.records.push(r),
            Err(_) => loaded.refused += 1,
        }
    }
    Ok(loaded)
}

/// Moves an unreadable file aside; the new name, if it could be moved.
pub(crate) fn move_aside(path: &Path) -> Option<PathBuf> {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".unreadable-{}", crate::clock::unix_now()));
    let aside = PathBuf::from(name);
    std::fs::rename(path, &aside).ok().map(|()| aside)
}

/// The file's bytes for `records`.
pub(crate) fn encode<'a>(records: impl Iterator<Item = &'a ApprovalRecord>) -> Vec<u8> {
    let wire = FileWire {
        records: records.map(RecordWire::from).collect(),
    };
    // Plain strings and numbers: serialising cannot fail.
    serde_json::to_vec(&wire).unwrap_or_default()
}

/// Writes `bytes` to `path` whole: a temporary file beside it, flushed to disk,
/// renamed into place, and the directory flushed too (so that the rename itself
/// survives a power loss).
pub(crate) fn write(path: &Path, bytes: &[u8]) -> Result<(), ApprovalFileError> {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    let temporary = PathBuf::from(name);
    let written = (|| {
        let mut f = std::fs::File::create(&temporary)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&temporary, path)?;
        let directory = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        std::fs::File::open(directory)?.sync_all()
    })();
    written.map_err(|e| ApprovalFileError {
        path: path.to_path_buf(),
        what: "write",
        error: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::choria::identity::Identity;
    use crate::choria::peers::Decision;
    use crate::test_nats_server::TempDir;

    #[test]
    fn records_survive_a_write_and_a_load_and_bad_ones_are_counted() {
        let dir = TempDir::new("approval-file");
        let path = dir.path().join("approvals.json");
        assert!(load(&path).unwrap().records.is_empty(), "no file yet");
        let record = ApprovalRecord {
            identity: Identity::parse("n1.example.net").unwrap(),
            decision: Decision::Denied,
            clock: 1,
            instance: "p1.example.net".into(),
            held_at: 0,
            at: 7,
            by: "alice (uid 1000, pid 9)".into(),
            operator: None,
            reason: "unknown rack".into(),
            first_seen: 1,
            last_seen: 2,
            version: "0.29.4".into(),
            facts: vec![("os.name".into(), "AlmaLinux".into())],
        };
        write(&path, &encode([record.clone()].iter())).unwrap();
        let loaded = load(&path).unwrap();
        assert_eq!((loaded.records, loaded.refused), (vec![record], 0));
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("n1.example.net", "n1 bad")).unwrap();
        let loaded = load(&path).unwrap();
        assert_eq!((loaded.records.len(), loaded.refused), (0, 1));
        std::fs::write(&path, b"{\"records\": 7}").unwrap();
        let e = load(&path).unwrap_err().to_string();
        assert!(e.starts_with("could not decode the approval file"), "{e}");
        let aside = move_aside(&path).unwrap();
        assert!(aside.exists() && !path.exists());
    }
}
