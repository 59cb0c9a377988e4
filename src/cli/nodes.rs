//! `choria-provisioner nodes`: what a running provisioner knows of each node, read
//! from its monitoring port (`/nodes`, `/nodes/<identity>`) and printed as a table
//! (or the JSON as served, with `--json`).
//!
//! The HTTP client is a plain `TcpStream`: `http://host:port` only, one HTTP/1.0
//! GET, bounded connect and read times and a bounded response size.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::Value;

use super::args::{Invocation, NodesArgs};
use super::fail;
use crate::metrics::NODES_PAGE_MAX;
use crate::untrusted::shown;

/// The largest `/nodes` answer read (a full history is about 1 MiB).
pub(crate) const MAX_RESPONSE: u64 = 16 * 1024 * 1024;

/// How long connecting, and then each read or write, may take.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(5);

/// The states `--state` takes, in the order the table shows them.
pub(crate) const STATES: [&str; 7] = crate::metrics::NODE_LISTS;

/// Runs `nodes`; returns the exit code.
pub(crate) fn nodes(inv: &Invocation, args: &NodesArgs) -> i32 {
    if let Some(state) = &args.state {
        if !STATES.contains(&state.as_str()) {
            return fail(format!(
                "--state {}: must be one of {}",
                shown(state),
                STATES.join(", ")
            ));
        }
    }
    let base = match monitor_address(inv, args) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let path = match &args.identity {
        Some(id) => match crate::choria::identity::Identity::parse(id) {
            Ok(id) => format!("/nodes/{id}"),
            Err(e) => return fail(format!("{}: {e}", shown(id))),
        },
        None => format!("/nodes?limit={NODES_PAGE_MAX}"),
    };
    let answer = match args.identity {
        Some(_) => get_json(&base, &path),
        None => fleet_document(&base, &path, args.state.as_deref()),
    };
    let (status, doc) = match answer {
        Ok(answer) => answer,
        Err(e) => return fail(e),
    };
    if status == 404 && args.identity.is_some() {
        return fail(format!(
            "{} is not known to the provisioner at {base}",
            args.identity.as_deref().unwrap_or_default()
        ));
    }
    if status != 200 {
        let why = doc["error"].as_str().map(shown).unwrap_or_default();
        return fail(format!("{base}{path} answered {status}: {why}"));
    }
    if doc["starting"] == Value::Bool(true) && !args.json {
        println!("The provisioner at {base} is starting: it knows no node yet.");
        return 0;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_else(|_| doc.to_string())
        );
    } else if args.identity.is_some() {
        print!("{}", node_table(&doc));
    } else {
        print!("{}", fleet_table(&doc, args.state.as_deref()));
    }
    0
}

/// The most pages of one list read: a million entries at 1,000 a page.
const PAGES_MAX: usize = 1000;

/// One GET of `path` at `base`, read as a JSON document: the status and the document.
fn get_json(base: &str, path: &str) -> Result<(u16, Value), String> {
    let (status, body) = get(base, path)?;
    let doc = serde_json::from_str(&body).map_err(|e| {
        format!(
            "{base}{path} answered {status} with no JSON document: {}",
            crate::json_text::describe(&e)
        )
    })?;
    Ok((status, doc))
}

/// The whole `/nodes` document: the first page of every list at `path`, then the
/// next pages of the lists `state` names (all of them without one), each list
/// joined into one. Each list's `total` is the provisioner's count.
fn fleet_document(base: &str, path: &str, state: Option<&str>) -> Result<(u16, Value), String> {
    let (status, mut doc) = get_json(base, path)?;
    if status != 200 {
        return Ok((status, doc));
    }
    let mut pages = 0;
    loop {
        let next: Vec<(String, String)> = doc["next"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(list, _)| state.is_none_or(|s| s == list.as_str()))
            .filter_map(|(list, path)| Some((list.clone(), path.as_str()?.to_string())))
            .collect();
        if next.is_empty() {
            break;
        }
        for (list, next_path) in next {
            pages += 1;
            // Only our own paths are followed: `/nodes?` and its parameters.
            let plain = next_path.starts_with("/nodes?")
                && next_path
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"/?=&_".contains(&b));
            if pages > PAGES_MAX || !plain {
                return Err(format!(
                    "{base}{path}: the {list} list goes on past {PAGES_MAX} pages, or its next page is not a /nodes path"
                ));
            }
            let (page_status, page) = get_json(base, &next_path)?;
            if page_status != 200 {
                return Err(format!("{base}{next_path} answered {page_status}"));
            }
            if let (Some(all), Some(more)) = (doc[&list].as_array_mut(), page[&list].as_array()) {
                all.extend(more.iter().cloned());
            }
            match page["next"].get(&list) {
                Some(further) => doc["next"][&list] = further.clone(),
                None => {
                    if let Some(next) = doc["next"].as_object_mut() {
                        next.remove(&list);
                    }
                }
            }
        }
    }
    if let Some(whole) = doc.as_object_mut() {
        whole.remove("next");
    }
    Ok((status, doc))
}

/// `--monitor`, or the monitoring address of `--config`.
fn monitor_address(inv: &Invocation, args: &NodesArgs) -> Result<String, String> {
    if let Some(url) = &args.monitor {
        return Ok(url.trim_end_matches('/').to_string());
    }
    let Some(file) = inv.config.as_deref() else {
        return Err("give the monitoring address with --monitor http://host:port, or the provisioner's --config".into());
    };
    let loaded = crate::config::Config::load(std::path::Path::new(file))
        .map_err(|e| format!("Provisioning could not be configured: {e}"))?;
    let c = loaded.config;
    if c.monitor_port == 0 {
        return Err(format!(
            "{file} sets no monitor_port: the provisioner serves no /nodes"
        ));
    }
    let host = match c.monitor_host.as_deref() {
        None | Some("0.0.0.0") => "127.0.0.1".to_string(),
        Some("::") => "[::1]".to_string(),
        Some(h) if h.contains(':') => format!("[{h}]"),
        Some(h) => h.to_string(),
    };
    Ok(format!("http://{host}:{}", c.monitor_port))
}

/// The socket address and `Host` of `http://host:port`.
fn parse_url(url: &str) -> Result<(SocketAddr, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{}: only http://host:port is supported", shown(url)))?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err("the monitoring address takes no user or password".into());
    }
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| format!("{}: {e} (give http://host:port)", shown(authority)))?
        .next()
        .ok_or_else(|| format!("{}: no address", shown(authority)))?;
    Ok((addr, authority.to_string()))
}

/// One GET of `path` at `base`: the status and the body.
pub(crate) fn get(base: &str, path: &str) -> Result<(u16, String), String> {
    let (addr, host) = parse_url(base)?;
    let what = format!("{base}{path}");
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)
        .map_err(|e| format!("cannot connect to {what}: {e}"))?;
    let _ = stream.set_read_timeout(Some(TIMEOUT));
    let _ = stream.set_write_timeout(Some(TIMEOUT));
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {host}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("cannot ask {what}: {e}"))?;
    let mut raw = Vec::new();
    stream
        .take(MAX_RESPONSE + 1)
        .read_to_end(&mut raw)
        .map_err(|e| format!("cannot read the answer of {what}: {e}"))?;
    if raw.len() as u64 > MAX_RESPONSE {
        return Err(format!("{what} answered more than {MAX_RESPONSE} bytes"));
    }
    let text = String::from_utf8(raw).map_err(|_| format!("{what} answered no text"))?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{what} answered no HTTP response"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{what} answered no HTTP status"))?;
    Ok((status, body.to_string()))
}

/// The line that says provisioning is paused, and by whom; empty when it is not.
fn pause_line(doc: &Value) -> String {
    let operator = &doc["operator_pause"];
    if operator.is_object() {
        let since = operator["since"]
            .as_i64()
            .map(|t| crate::clock::rfc3339(t as f64))
            .unwrap_or_default();
        let reason = match field(operator, "reason") {
            r if r.is_empty() => "no reason given".to_string(),
            r => r,
        };
        format!(
            "PAUSED by an operator since {since}: {reason} (choria-provisioner resume ends it)\n"
        )
    } else if doc["paused"] == Value::Bool(true) {
        "PAUSED: this instance does not lead or is not in the active set\n".to_string()
    } else {
        String::new()
    }
}

/// A string field of `v`, made safe for a terminal.
fn field(v: &Value, key: &str) -> String {
    match &v[key] {
        Value::String(s) => shown(s),
        Value::Null => String::new(),
        other => shown(&other.to_string()),
    }
}

/// `2026-12-04T06:01:02Z` shown as `06:01:02`.
fn clock(v: &Value, key: &str) -> String {
    let t = field(v, key);
    t.split('T')
        .nth(1)
        .map(|s| s.trim_end_matches('Z').to_string())
        .unwrap_or(t)
}

/// Rows laid out in columns under `header`.
fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| -> String {
        let n = cells.len();
        let mut out = String::new();
        for (i, (cell, w)) in cells.into_iter().zip(&widths).enumerate() {
            if i + 1 == n {
                out.push_str(&cell);
            } else {
                out.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        out.push_str(&line(row.clone()));
    }
    out
}

/// Most characters of an error shown in a table (`--json` has all of it).
const ERROR_COLUMN: usize = 100;

fn short(text: String) -> String {
    if text.chars().count() <= ERROR_COLUMN {
        text
    } else {
        text.chars().take(ERROR_COLUMN - 1).collect::<String>() + "…"
    }
}

fn current_row(v: &Value) -> Vec<String> {
    let state = field(v, "state");
    let detail = match state.as_str() {
        // `/nodes/<identity>` looks a node up and gives no place in the queue.
        "queued" if v["position"].is_null() => format!("since {}", clock(v, "since")),
        "queued" => format!("#{} since {}", field(v, "position"), clock(v, "since")),
        "in_flight" => format!(
            "{} try {} since {} (attempt {})",
            field(v, "step"),
            field(v, "tries"),
            clock(v, "step_since"),
            field(v, "attempt")
        ),
        "cooling_down" => format!("until {}", clock(v, "until")),
        "upgrading" => format!("since {}", clock(v, "since")),
        "pending" => format!(
            "first seen {}, last seen {}",
            clock(v, "first_seen"),
            clock(v, "last_seen")
        ),
        "denied" if field(v, "reason").is_empty() => {
            format!("since {} by {}", clock(v, "since"), field(v, "by"))
        }
        "denied" => format!(
            "since {} by {}: {}",
            clock(v, "since"),
            field(v, "by"),
            field(v, "reason")
        ),
        _ => String::new(),
    };
    vec![state, field(v, "identity"), detail]
}

fn recent_row(r: &Value) -> Vec<String> {
    let retried = r["retries"].as_array().map_or(0, Vec::len);
    let why = [
        field(r, "error"),
        field(r, "reason"),
        field(r, "helper_msg"),
    ]
    .into_iter()
    .find(|s| !s.is_empty())
    .unwrap_or_else(|| match retried {
        0 => String::new(),
        n => format!("{n} tries retried (see the node)"),
    });
    let versions = match (field(r, "version_before"), field(r, "version_after")) {
        (b, a) if !a.is_empty() => format!(" ({b} -> {a})"),
        _ => String::new(),
    };
    vec![
        clock(r, "time"),
        field(r, "identity"),
        field(r, "outcome"),
        field(r, "step"),
        field(r, "attempt"),
        format!("{}s", field(r, "duration_seconds")),
        short(format!("{why}{versions}")),
    ]
}

const RECENT_HEADER: [&str; 7] = [
    "TIME",
    "IDENTITY",
    "OUTCOME",
    "STEP",
    "ATTEMPT",
    "TOOK",
    "ERROR / MESSAGE",
];

/// The lists of nodes known now, in the order the table shows them: every list
/// but the last, `recent`.
const CURRENT: &[&str] = match STATES.split_last() {
    Some((_, current)) => current,
    None => &[],
};

/// The `/nodes` document as tables: nodes known now, then recent attempts.
pub(crate) fn fleet_table(doc: &Value, state: Option<&str>) -> String {
    let wanted = |s: &str| state.is_none_or(|w| w == s);
    let mut out = String::new();
    let mut rows = Vec::new();
    for key in CURRENT {
        if !wanted(key) {
            continue;
        }
        for v in doc[key].as_array().into_iter().flatten() {
            rows.push(current_row(v));
        }
    }
    // The provisioner's own count where it gives one (every list's, even those not
    // fetched whole), else what the document holds.
    // The approval lists are there only with `approval: required`.
    let counts: Vec<String> = CURRENT
        .iter()
        .filter(|k| !matches!(**k, "pending" | "denied") || !doc[**k].is_null())
        .map(|k| {
            let held = doc[*k].as_array().map_or(0, Vec::len) as u64;
            format!("{} {k}", doc["total"][*k].as_u64().unwrap_or(held))
        })
        .collect();
    out.push_str(&format!(
        "Provisioner {} at {}: {}\n",
        field(doc, "instance"),
        field(doc, "time"),
        counts.join(", ")
    ));
    out.push_str(&pause_line(doc));
    out.push('\n');
    if state != Some("recent") {
        if rows.is_empty() {
            out.push_str("No node is queued, in flight, cooling down or upgrading.\n");
        } else {
            out.push_str(&columns(&["STATE", "IDENTITY", "DETAIL"], &rows));
        }
    }
    if wanted("recent") {
        let recent: Vec<Vec<String>> = doc["recent"]
            .as_array()
            .into_iter()
            .flatten()
            .map(recent_row)
            .collect();
        out.push_str(&format!(
            "\nRecent attempts, newest first ({}):\n",
            recent.len()
        ));
        if !recent.is_empty() {
            out.push_str(&columns(&RECENT_HEADER, &recent));
        }
    }
    out
}

/// One node's document: its state now and its recent attempts.
pub(crate) fn node_table(doc: &Value) -> String {
    let mut out = columns(&["STATE", "IDENTITY", "DETAIL"], &[current_row(doc)]);
    let recent: Vec<Value> = doc["recent"].as_array().cloned().unwrap_or_default();
    out.push_str(&format!(
        "\nRecent attempts, newest first ({}):\n",
        recent.len()
    ));
    if !recent.is_empty() {
        out.push_str(&columns(
            &RECENT_HEADER,
            &recent.iter().map(recent_row).collect::<Vec<_>>(),
        ));
        // The facts an auditor asks for, of the newest attempt that has any.
        for r in &recent {
            let facts: Vec<String> =
                [
                    "provisioning_jwt_id",
                    "provisioning_jwt_expires",
                    "server_jwt_id",
                    "server_jwt_expires",
                    "certificate_serial",
                    "certificate_sha256",
                    "version_before",
                    "version_after",
                ]
                .iter()
                .filter(|k| !r[**k].is_null())
                .map(|k| format!("  {k}: {}", field(r, k)))
                .chain(
                    r["retries"].as_array().into_iter().flatten().map(|t| {
                        format!("  retried: {}", t.as_str().map(shown).unwrap_or_default())
                    }),
                )
                .collect();
            if !facts.is_empty() {
                out.push_str(&format!(
                    "\nFacts of attempt {} ({}):\n{}\n",
                    field(r, "attempt"),
                    field(r, "time"),
                    facts.join("\n")
                ));
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_plain_http_host_port() {
        assert!(parse_url("https://127.0.0.1:1")
            .unwrap_err()
            .contains("only http://"));
        assert!(parse_url("http://u:p@127.0.0.1:1")
            .unwrap_err()
            .contains("no user"));
        assert!(parse_url("http://127.0.0.1").is_err(), "a port is needed");
        assert_eq!(
            parse_url("http://127.0.0.1:8080/").unwrap().1,
            "127.0.0.1:8080"
        );
    }

    #[test]
    fn a_fleet_reads_at_a_glance() {
        let doc = json!({
            "instance": "p1.test", "time": "2026-12-04T06:00:00Z",
            "queued": [{"identity": "q1", "state": "queued", "position": 1, "since": "2026-12-04T05:59:58Z"}],
            "in_flight": [{"identity": "f1", "state": "in_flight", "step": "configure", "tries": 2,
                           "step_since": "2026-12-04T05:59:59Z", "attempt": 3}],
            "cooling_down": [], "upgrading": [],
            "recent": [{"time": "2026-12-04T05:59:00Z", "identity": "r1\u{1b}[2J", "outcome": "failed",
                        "step": "inventory", "attempt": 1, "duration_seconds": 1.5,
                        "error": "rpcutil#inventory failed"},
                       {"time": "2026-12-04T05:58:00Z", "identity": "r2", "outcome": "provisioned",
                        "step": "restart", "attempt": 1, "duration_seconds": 22.7,
                        "retries": ["choria_provision#restart try 1/3: no reply"]}],
        });
        let t = fleet_table(&doc, None);
        assert!(
            t.contains("1 queued, 1 in_flight, 0 cooling_down, 0 upgrading"),
            "{t}"
        );
        assert!(t.contains("queued     q1        #1 since 05:59:58"), "{t}");
        assert!(
            t.contains("in_flight  f1        configure try 2 since 05:59:59 (attempt 3)"),
            "{t}"
        );
        assert!(
            t.contains("failed       inventory  1        1.5s   rpcutil#inventory failed"),
            "{t}"
        );
        assert!(!t.contains('\u{1b}'), "no terminal escapes: {t}");
        assert!(t.contains("22.7s  1 tries retried (see the node)"), "{t}");
        let only = fleet_table(&doc, Some("queued"));
        assert!(
            only.contains("q1") && !only.contains("f1") && !only.contains("Recent"),
            "{only}"
        );
        let looked_up =
            json!({"identity": "q1", "state": "queued", "since": "2026-12-04T05:59:58Z"});
        assert!(node_table(&looked_up).contains("queued  q1        since 05:59:58"));
        let mut paged = doc.clone();
        paged["total"] = json!({"queued": 4000, "in_flight": 1, "cooling_down": 0, "upgrading": 0});
        assert!(fleet_table(&paged, None).contains("4000 queued, 1 in_flight"));
        let recent = fleet_table(&doc, Some("recent"));
        assert!(
            !recent.contains("q1") && recent.contains("rpcutil#inventory"),
            "{recent}"
        );
    }
}
