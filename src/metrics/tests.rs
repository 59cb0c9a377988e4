//! The metrics' registry and rendering against their documented names and labels.

use super::*;

/// `m`'s exposition holds every one of `series`.
fn assert_renders<S: AsRef<str>>(m: &Metrics, series: &[S]) {
    let text = m.render();
    for series in series.iter().map(AsRef::as_ref) {
        assert!(text.contains(series), "{series} missing from\n{text}");
    }
}

#[test]
fn initialised_series_are_visible_at_zero() {
    let m = Metrics::new("lon").unwrap();
    assert_renders(
        &m,
        &[
            "choria_provisioner_discovered{site=\"lon\"} 0",
            "choria_provisioner_provisioned{site=\"lon\"} 0",
            "choria_provisioner_work_queue_entries{site=\"lon\"} 0",
            "choria_provisioner_waiting_nodes{site=\"lon\"} 0",
            "choria_provisioner_helper_timeouts{site=\"lon\"} 0",
            "choria_provisioner_connected{site=\"lon\"} 0",
            "choria_provisioner_ready{site=\"lon\"} 0",
            "choria_provisioner_peers{site=\"lon\"} 0",
            "choria_provisioner_share{site=\"lon\"} 0",
            "choria_provisioner_peer_messages_refused{reason=\"foreign_site\",site=\"lon\"} 0",
            "choria_provisioner_contested_replies{rpc=\"choria_provision#configure\",site=\"lon\"} 0",
        ],
    );
}

#[test]
fn summaries_have_only_sum_and_count() {
    let m = Metrics::new("lon").unwrap();
    m.observe_rpc("rpcutil", "inventory", 0.25);
    m.observe_rpc("rpcutil", "inventory", 0.5);
    // Another RPC, whose parts are prefix and suffix of the first's label.
    m.observe_rpc("rpcutil#in", "ventory", 9.0);
    m.observe_helper(1.5);
    assert_renders(
        &m,
        &[
            "# TYPE choria_provisioner_rpc_time summary",
            "choria_provisioner_rpc_time_sum{rpc=\"rpcutil#inventory\",site=\"lon\"} 0.75",
            "choria_provisioner_rpc_time_count{rpc=\"rpcutil#inventory\",site=\"lon\"} 2",
            "choria_provisioner_rpc_time_count{rpc=\"rpcutil#in#ventory\",site=\"lon\"} 1",
            "choria_provisioner_helper_time_sum{site=\"lon\"} 1.5",
        ],
    );
    assert!(!m.render().contains("quantile"));
}

#[test]
fn every_outcome_starts_at_zero() {
    let m = Metrics::new("lon").unwrap();
    let zeros = OUTCOMES.iter().map(|outcome| {
        format!("choria_provisioner_outcomes{{outcome=\"{outcome}\",site=\"lon\"}} 0\n")
    });
    let series: Vec<String> = std::iter::once("# TYPE choria_provisioner_outcomes counter".into())
        .chain(zeros)
        .collect();
    assert_renders(&m, &series);
}

#[test]
fn observe_outcome_counts_and_times_the_attempt() {
    let m = Metrics::new("lon").unwrap();
    assert!(m.observe_outcome("provisioned", 0.02));
    assert!(m.observe_outcome("provisioned", 7.0));
    assert!(m.observe_outcome("locked", 400.0));
    assert_renders(
        &m,
        &[
            "choria_provisioner_outcomes{outcome=\"provisioned\",site=\"lon\"} 2\n",
            "choria_provisioner_outcomes{outcome=\"locked\",site=\"lon\"} 1\n",
            "choria_provisioner_outcomes{outcome=\"failed\",site=\"lon\"} 0\n",
            "# TYPE choria_provisioner_node_duration_seconds histogram\n",
            "choria_provisioner_node_duration_seconds_bucket{site=\"lon\",le=\"0.01\"} 0\n",
            "choria_provisioner_node_duration_seconds_bucket{site=\"lon\",le=\"0.025\"} 1\n",
            "choria_provisioner_node_duration_seconds_bucket{site=\"lon\",le=\"10\"} 2\n",
            "choria_provisioner_node_duration_seconds_bucket{site=\"lon\",le=\"300\"} 2\n",
            "choria_provisioner_node_duration_seconds_bucket{site=\"lon\",le=\"+Inf\"} 3\n",
            "choria_provisioner_node_duration_seconds_sum{site=\"lon\"} 407.02\n",
            "choria_provisioner_node_duration_seconds_count{site=\"lon\"} 3\n",
        ],
    );
}

#[test]
fn an_unknown_outcome_makes_no_series() {
    let m = Metrics::new("lon").unwrap();
    assert!(!m.observe_outcome("exploded", 1.0));
    assert!(!m.observe_outcome("Provisioned", f64::NAN));
    let text = m.render();
    assert!(!text.contains("exploded"), "{text}");
    assert!(!text.contains("Provisioned"), "{text}");
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("choria_provisioner_outcomes{"))
        .collect();
    assert_eq!(series.len(), OUTCOMES.len(), "{text}");
    assert!(
        text.contains("choria_provisioner_node_duration_seconds_count{site=\"lon\"} 2\n"),
        "{text}"
    );
    assert!(
        text.contains("choria_provisioner_node_duration_seconds_sum{site=\"lon\"} 1\n"),
        "{text}"
    );
}

#[test]
fn build_info_names_the_version() {
    let m = Metrics::new("lon").unwrap();
    let series = format!(
        "choria_provisioner_build_info{{site=\"lon\",version=\"{}\"}} 1\n",
        env!("CARGO_PKG_VERSION")
    );
    assert!(m.render().contains(&series), "{series}");
}

#[test]
fn two_instances_do_not_share_state() {
    let a = Metrics::new("a").unwrap();
    let b = Metrics::new("b").unwrap();
    a.provisioned.inc();
    assert_eq!(a.provisioned.get(), 1);
    assert_eq!(b.provisioned.get(), 0);
}

#[test]
fn process_metrics_are_read() {
    let s = ProcessStats::read();
    assert!(
        s.resident_bytes > 0.0 && s.threads >= 1.0 && s.open_fds >= 1.0,
        "{s:?}"
    );
    assert!(s.start_time > 1.6e9, "{s:?}");
}
