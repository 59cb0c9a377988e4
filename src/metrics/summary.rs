//! A Prometheus summary with only `_sum` and `_count`, as Go's client produces for a
//! `SummaryVec` without objectives. The Rust `prometheus` crate has no summary type,
//! so this small collector renders the same text series.

use std::collections::BTreeMap;

use parking_lot::Mutex;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType, Summary};

/// A labelled summary family (`_sum`/`_count` per label set, no quantiles).
#[derive(Debug)]
pub struct SumCountVec {
    desc: Desc,
    /// Names of the labels after the constant ones, in order.
    labels: Vec<String>,
    /// Constant label pairs (e.g. `site`), rendered first.
    constants: Vec<(String, String)>,
    series: Mutex<BTreeMap<Vec<String>, (f64, u64)>>,
}

impl SumCountVec {
    /// A family called `name` with `help`, constant labels and variable `labels`.
    pub(crate) fn new(
        name: &str,
        help: &str,
        constants: &[(&str, &str)],
        labels: &[&str],
    ) -> prometheus::Result<SumCountVec> {
        let const_labels = constants
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let desc = Desc::new(
            name.into(),
            help.into(),
            labels.iter().map(|l| l.to_string()).collect(),
            const_labels,
        )?;
        Ok(SumCountVec {
            desc,
            labels: labels.iter().map(|l| l.to_string()).collect(),
            constants: constants
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            series: Mutex::new(BTreeMap::new()),
        })
    }

    /// Records one observation of `value` (seconds) for the label `values`.
    pub fn observe(&self, values: &[&str], value: f64) {
        debug_assert_eq!(values.len(), self.labels.len());
        self.observe_where(
            |key| key.iter().map(String::as_str).eq(values.iter().copied()),
            || values.iter().map(|v| v.to_string()).collect(),
            value,
        );
    }

    /// Records one observation of `value` (seconds) for the series whose label values
    /// `matches` (of which there is at most one), made by `make` if there is none
    /// yet. A handful of series (an RPC's name, the site): found without making the
    /// key, which is only made for the first observation of a series.
    pub(crate) fn observe_where(
        &self,
        matches: impl Fn(&[String]) -> bool,
        make: impl FnOnce() -> Vec<String>,
        value: f64,
    ) {
        let mut series = self.series.lock();
        let entry = match series.iter_mut().find(|(key, _)| matches(key)) {
            Some((_, entry)) => entry,
            None => {
                let key = make();
                debug_assert_eq!(key.len(), self.labels.len());
                series.entry(key).or_insert((0.0, 0))
            }
        };
        entry.0 += value;
        entry.1 += 1;
    }

    /// Creates the series for the label `values` at zero, so it is exported before
    /// the first observation.
    pub(crate) fn touch(&self, values: &[&str]) {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        self.series.lock().entry(key).or_insert((0.0, 0));
    }

    /// The `(sum, count)` recorded so far for the label `values`.
    pub fn get(&self, values: &[&str]) -> (f64, u64) {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        self.series.lock().get(&key).copied().unwrap_or((0.0, 0))
    }
}

fn pair(name: &str, value: &str) -> LabelPair {
    let mut p = LabelPair::default();
    p.set_name(name.to_string());
    p.set_value(value.to_string());
    p
}

impl Collector for SumCountVec {
    fn desc(&self) -> Vec<&Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let series = self.series.lock();
        if series.is_empty() {
            return Vec::new();
        }
        let mut family = MetricFamily::default();
        family.set_name(self.desc.fq_name.clone());
        family.set_help(self.desc.help.clone());
        family.set_field_type(MetricType::SUMMARY);
        let metrics = series
            .iter()
            .map(|(values, (sum, count))| {
                let mut labels: Vec<LabelPair> =
                    self.constants.iter().map(|(k, v)| pair(k, v)).collect();
                labels.extend(self.labels.iter().zip(values).map(|(k, v)| pair(k, v)));
                labels.sort_by(|a, b| a.name().cmp(b.name()));
                let mut summary = Summary::default();
                summary.set_sample_sum(*sum);
                summary.set_sample_count(*count);
                let mut metric = Metric::from_label(labels);
                metric.set_summary(summary);
                metric
            })
            .collect();
        family.set_metric(metrics);
        vec![family]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_add_up_per_series() {
        let rpc = SumCountVec::new("t_rpc_seconds", "t", &[("site", "s")], &["rpc"]).unwrap();
        rpc.observe(&["inventory"], 0.5);
        rpc.observe(&["configure"], 0.25);
        rpc.observe(&["inventory"], 1.0);
        assert_eq!(rpc.get(&["inventory"]), (1.5, 2));
        assert_eq!(rpc.get(&["configure"]), (0.25, 1));
        assert_eq!(rpc.get(&["restart"]), (0.0, 0));
        assert_eq!(rpc.series.lock().len(), 2, "one series per label value");
    }
}
