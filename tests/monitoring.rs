//! The Grafana dashboard and Prometheus alert rules in `packaging/monitoring/`: every
//! series, matcher label, grouping label and legend label their expressions use
//! exists in the provisioner's `/metrics`; the dashboard is well formed; the rules
//! pass `promtool check rules` and their unit tests (`promtool test rules`) when
//! promtool is installed (Debian: `apt-get install prometheus`; the test says SKIP
//! without it).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use support::on_path;

use choria_provisioner::metrics::Metrics;

const DASHBOARD: &str = "packaging/monitoring/grafana-dashboard.json";
const ALERTS: &str = "packaging/monitoring/prometheus-alerts.yaml";
const ALERT_TESTS: &str = "packaging/monitoring/prometheus-alerts.test.yaml";

/// Series the dashboard already shows that the provisioner does not export yet
/// (none now: `choria_provisioner_peers` came with active-active, issue #14). A name
/// here must not be in `/metrics`: once it is, remove it from this list.
const EXPECTED_TO_COME: [&str; 0] = [];

/// Labels Prometheus adds to every scraped series.
const TARGET_LABELS: [&str; 2] = ["instance", "job"];

fn path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(path(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// `/metrics` of a provisioner in which every family has at least one series.
fn exposition() -> String {
    let m = Metrics::new("lon").unwrap();
    m.refused_identities
        .with_label_values(&["discovery", "invalid_character"])
        .inc();
    m.rejected_replies.with_label_values(&["undecodable"]).inc();
    m.dropped_events.with_label_values(&["too_large"]).inc();
    m.election_campaigns
        .with_label_values(&["provisioner", "p1", "leader"])
        .inc();
    m.election_leader
        .with_label_values(&["provisioner", "p1"])
        .set(1);
    m.election_interval_seconds
        .with_label_values(&["provisioner", "p1"])
        .set(5.0);
    for c in [
        &m.connector_initial_attempts,
        &m.connector_reconnections,
        &m.connector_closed,
        &m.connector_errors,
    ] {
        c.with_label_values(&["p1"]).inc();
    }
    m.connector_initial_connect_time.observe(&["p1"], 0.1);
    for family in m.registry().gather() {
        assert!(
            !family.get_metric().is_empty(),
            "{} has no series: give it one in exposition()",
            family.name()
        );
    }
    m.render()
}

/// Series name → the label names its series carry.
fn series_labels(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let end = line.find(['{', ' ']).expect("a sample line has a name");
        let labels = out.entry(line[..end].to_string()).or_default();
        if line[end..].starts_with('{') {
            let chars: Vec<char> = line[end..].chars().collect();
            let mut i = 1;
            while i < chars.len() && chars[i] != '}' {
                let start = i;
                while chars[i] != '=' {
                    i += 1;
                }
                labels.insert(chars[start..i].iter().collect());
                i = skip_string(&chars, i + 1);
                if chars[i] == ',' {
                    i += 1;
                }
            }
        }
    }
    out
}

/// What one PromQL expression refers to.
#[derive(Debug, Default, PartialEq)]
struct Refs {
    /// Metric names with the label names of their matchers.
    selectors: Vec<(String, Vec<String>)>,
    /// Labels of `by`, `without`, `on`, `ignoring`, `group_left`, `group_right`.
    grouping: Vec<String>,
}

const AGGREGATIONS: [&str; 14] = [
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
const GROUPING: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: [&str; 8] = [
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan",
];

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The index after the string literal starting at `i` (a quote character).
fn skip_string(chars: &[char], i: usize) -> usize {
    let quote = chars[i];
    let mut j = i + 1;
    while j < chars.len() && chars[j] != quote {
        if chars[j] == '\\' && quote != '`' {
            j += 1;
        }
        j += 1;
    }
    assert!(j < chars.len(), "unterminated string in {chars:?}");
    j + 1
}

fn skip_space(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    i
}

fn ident_at(chars: &[char], i: usize) -> (String, usize) {
    let mut j = i;
    while j < chars.len() && is_ident(chars[j]) {
        j += 1;
    }
    (chars[i..j].iter().collect(), j)
}

/// The label names of the `(a, b)` list at `i`, and the index after it.
fn label_list(chars: &[char], i: usize) -> (Vec<String>, usize) {
    assert_eq!(chars.get(i), Some(&'('), "a label list starts with (");
    let close = i + chars[i..].iter().position(|&c| c == ')').expect("closed");
    let inner: String = chars[i + 1..close].iter().collect();
    let labels = inner
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    (labels, close + 1)
}

/// The metric names, matcher labels and grouping labels of a PromQL expression
/// (with Grafana's `$variables` allowed).
fn scan(expr: &str) -> Refs {
    let chars: Vec<char> = expr.chars().collect();
    let mut refs = Refs::default();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i);
        } else if c == '[' {
            i += chars[i..].iter().position(|&c| c == ']').expect("closed [");
        } else if c == '$' {
            // A Grafana variable: $name or ${name}.
            i += 1;
            if chars.get(i) == Some(&'{') {
                i += chars[i..]
                    .iter()
                    .position(|&c| c == '}')
                    .expect("closed ${");
            } else {
                i = ident_at(&chars, i).1;
            }
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (is_ident(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if c == '{' {
            let Some((_, labels)) = refs.selectors.last_mut() else {
                panic!("a selector without a metric name in {expr}");
            };
            i += 1;
            loop {
                i = skip_space(&chars, i);
                match chars[i] {
                    '}' => break,
                    ',' => i += 1,
                    _ => {
                        let (label, j) = ident_at(&chars, i);
                        assert!(!label.is_empty(), "a matcher without a label in {expr}");
                        assert_ne!(label, "__name__", "name the metric in {expr}");
                        labels.push(label);
                        i = skip_space(&chars, j);
                        while matches!(chars[i], '=' | '!' | '~') {
                            i += 1;
                        }
                        i = skip_string(&chars, skip_space(&chars, i));
                    }
                }
            }
            i += 1;
        } else if is_ident_start(c) {
            let (word, j) = ident_at(&chars, i);
            let next = skip_space(&chars, j);
            if GROUPING.contains(&word.as_str()) {
                if chars.get(next) == Some(&'(') {
                    let (labels, after) = label_list(&chars, next);
                    refs.grouping.extend(labels);
                    i = after;
                } else {
                    i = j;
                }
                continue;
            }
            let function = chars.get(next) == Some(&'(');
            if !function
                && !AGGREGATIONS.contains(&word.as_str())
                && !KEYWORDS.contains(&word.as_str())
            {
                refs.selectors.push((word, Vec::new()));
            }
            i = j;
        } else {
            i += 1;
        }
    }
    refs
}

/// Checks one expression against the exposition; the problems found.
fn check_expr(
    place: &str,
    expr: &str,
    legend: Option<&str>,
    exported: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let refs = scan(expr);
    let mut problems = Vec::new();
    if refs.selectors.is_empty() {
        problems.push(format!("{place}: names no series: {expr}"));
    }
    let mut known: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
    for (name, labels) in &refs.selectors {
        match exported.get(name) {
            Some(have) => {
                known.extend(have.iter().cloned());
                for label in labels {
                    if !have.contains(label) && !TARGET_LABELS.contains(&label.as_str()) {
                        problems.push(format!("{place}: {name} has no label {label}"));
                    }
                }
            }
            None if EXPECTED_TO_COME.contains(&name.as_str()) => {
                known.insert("site".into());
            }
            None => problems.push(format!("{place}: {name} is not in /metrics ({expr})")),
        }
    }
    let legend_labels = legend
        .unwrap_or("")
        .split("{{")
        .skip(1)
        .filter_map(|s| s.split_once("}}").map(|(l, _)| l.trim().to_string()));
    for label in refs.grouping.iter().cloned().chain(legend_labels) {
        if !known.contains(&label) {
            problems.push(format!(
                "{place}: no series in it has label {label}: {expr}"
            ));
        }
    }
    problems
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut out = Vec::new();
    let mut todo: Vec<&serde_json::Value> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .collect();
    while let Some(p) = todo.pop() {
        if let Some(nested) = p["panels"].as_array() {
            todo.extend(nested);
        }
        out.push(p);
    }
    out
}

fn dashboard() -> serde_json::Value {
    serde_json::from_str(&read(DASHBOARD)).expect("the dashboard is JSON")
}

fn alert_rules() -> Vec<serde_yaml::Value> {
    let doc: serde_yaml::Value = serde_yaml::from_str(&read(ALERTS)).expect("the rules are YAML");
    doc["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules").iter().cloned())
        .collect()
}

#[test]
fn the_scanner_finds_names_matchers_and_grouping_labels() {
    let refs = scan(
        r#"histogram_quantile(0.9, sum by (le, site) (rate(a_bucket{site=~"$site", x!="}"}[$__rate_interval])))
           / on (site) group_left sum without (rpc) (b offset 5m) > bool 1e-3 and c{y='q\'z'} or max(d[5m:1m]) * ${k}"#,
    );
    assert_eq!(
        refs,
        Refs {
            selectors: vec![
                ("a_bucket".into(), vec!["site".into(), "x".into()]),
                ("b".into(), vec![]),
                ("c".into(), vec!["y".into()]),
                ("d".into(), vec![]),
            ],
            grouping: vec!["le".into(), "site".into(), "site".into(), "rpc".into()],
        }
    );
}

#[test]
fn the_exposition_parser_reads_names_and_labels() {
    let text = "# HELP x y\nx{a=\"1,}\\\"\",b=\"\"} 1\nz 2\n";
    let got = series_labels(text);
    assert_eq!(got["x"], BTreeSet::from(["a".to_string(), "b".to_string()]));
    assert!(got["z"].is_empty());
}

#[test]
fn the_check_catches_unknown_series_and_labels() {
    let exported = series_labels(&exposition());
    let problems = check_expr(
        "t",
        r#"sum by (colour) (rate(choria_provisioner_outcomes{outcme="failed"}[5m])) + choria_provisioner_nope"#,
        Some("{{ shade }}"),
        &exported,
    );
    assert_eq!(
        problems,
        [
            "t: choria_provisioner_outcomes has no label outcme",
            "t: choria_provisioner_nope is not in /metrics (sum by (colour) (rate(choria_provisioner_outcomes{outcme=\"failed\"}[5m])) + choria_provisioner_nope)",
            "t: no series in it has label colour: sum by (colour) (rate(choria_provisioner_outcomes{outcme=\"failed\"}[5m])) + choria_provisioner_nope",
            "t: no series in it has label shade: sum by (colour) (rate(choria_provisioner_outcomes{outcme=\"failed\"}[5m])) + choria_provisioner_nope",
        ]
    );
}

#[test]
fn series_expected_to_come_are_not_exported_yet() {
    let exported = series_labels(&exposition());
    for name in EXPECTED_TO_COME {
        assert!(
            !exported.contains_key(name),
            "{name} is exported now: remove it from EXPECTED_TO_COME"
        );
    }
}

#[test]
fn every_dashboard_expression_uses_exported_series() {
    let exported = series_labels(&exposition());
    let dash = dashboard();
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    let mut exprs = 0;
    for panel in panels(&dash) {
        let title = panel["title"].as_str().unwrap_or("?");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("every target has an expr");
            exprs += 1;
            used.extend(scan(expr).selectors.into_iter().map(|(n, _)| n));
            problems.extend(check_expr(
                &format!("panel {title:?}"),
                expr,
                target["legendFormat"].as_str(),
                &exported,
            ));
        }
    }
    for var in dash["templating"]["list"].as_array().expect("templating") {
        let query = match &var["query"] {
            serde_json::Value::Object(q) => q["query"].as_str().unwrap_or(""),
            q => q.as_str().unwrap_or(""),
        };
        let Some(args) = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
        else {
            continue;
        };
        let (selector, label) = args.rsplit_once(',').expect("label_values(series, label)");
        let place = format!("variable {}", var["name"]);
        problems.extend(check_expr(&place, selector, None, &exported));
        let label = label.trim();
        let names = scan(selector).selectors;
        if !names.iter().all(|(n, _)| {
            exported.get(n).is_some_and(|l| l.contains(label)) || TARGET_LABELS.contains(&label)
        }) {
            problems.push(format!("{place}: {selector} has no label {label}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(exprs >= 30, "only {exprs} expressions");
    // The series operators asked for (issues #11 and #15) are all on it.
    for name in [
        "choria_provisioner_outcomes",
        "choria_provisioner_node_duration_seconds_bucket",
        "choria_provisioner_work_queue_entries",
        "choria_provisioner_busy_workers",
        "choria_provisioner_helper_time_sum",
        "choria_provisioner_rpc_errors",
        "choria_election_leader",
        "choria_provisioner_peers",
        "choria_provisioner_connected",
        "choria_provisioner_refused_identities",
        "choria_provisioner_contested_replies",
        "choria_provisioner_unreachable_nodes",
    ] {
        assert!(used.contains(name), "the dashboard does not show {name}");
    }
}

#[test]
fn the_dashboard_is_well_formed() {
    let dash = dashboard();
    assert_eq!(dash["uid"], "choria-provisioner");
    assert!(dash["title"].as_str().is_some_and(|t| !t.is_empty()));
    let mut ids = BTreeSet::new();
    for panel in panels(&dash) {
        let title = panel["title"].as_str().expect("every panel has a title");
        assert!(
            ids.insert(panel["id"].as_u64().expect("id")),
            "id of {title}"
        );
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(
            x + w <= 24 && grid["h"].as_u64().unwrap() > 0,
            "{title}: {grid}"
        );
        if panel["type"] == "row" {
            continue;
        }
        assert!(
            panel["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{title} has no description"
        );
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title} has no query");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${datasource}", "{title}");
            assert!(refs.insert(t["refId"].as_str().unwrap()), "{title}: refId");
        }
    }
    let vars: Vec<&str> = dash["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(vars, ["datasource", "site", "instance"]);
}

#[test]
fn every_alert_expression_uses_exported_series() {
    let exported = series_labels(&exposition());
    let rules = alert_rules();
    let mut problems = Vec::new();
    let mut names = Vec::new();
    for rule in &rules {
        let name = rule["alert"].as_str().expect("alerting rules only");
        names.push(name);
        let expr = rule["expr"].as_str().expect("expr");
        problems.extend(check_expr(&format!("alert {name}"), expr, None, &exported));
        for key in ["summary", "description"] {
            assert!(
                rule["annotations"][key]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{name} has no {key}"
            );
        }
        assert!(
            matches!(
                rule["labels"]["severity"].as_str(),
                Some("warning" | "critical")
            ),
            "{name}: severity"
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    for wanted in [
        "ChoriaProvisionerNoLeader",
        "ChoriaProvisionerQueueFilling",
        "ChoriaProvisionerErrorRatio",
        "ChoriaProvisionerHelperTimeouts",
        "ChoriaProvisionerDisconnected",
        "ChoriaProvisionerContestedReplies",
        "ChoriaProvisionerSigningTokenExpiring",
    ] {
        assert!(names.contains(&wanted), "no {wanted} in {names:?}");
    }
    let contested = rules
        .iter()
        .find(|r| r["alert"] == "ChoriaProvisionerContestedReplies")
        .unwrap();
    assert_eq!(contested["labels"]["category"], "security");
}

#[test]
fn promtool_accepts_the_rules_and_their_tests_pass() {
    if !on_path("promtool") {
        println!(
            "SKIP promtool_accepts_the_rules_and_their_tests_pass: promtool not installed (apt-get install prometheus)"
        );
        return;
    }
    for args in [["check", "rules", ALERTS], ["test", "rules", ALERT_TESTS]] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("promtool runs");
        assert!(
            out.status.success(),
            "promtool {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
