//! `process_*` series read from `/proc/self`, the same names Go's process collector
//! exports, without pulling in the `procfs` crate.

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Gauge, Metric, MetricFamily, MetricType};

use crate::proc_self::{stat_field, stat_fields};

/// Collects CPU time, memory, file descriptors, threads and start time of this process.
#[derive(Debug)]
pub struct ProcessCollector {
    descs: Vec<Desc>,
}

const SERIES: [(&str, &str, MetricType); 7] = [
    (
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
        MetricType::COUNTER,
    ),
    (
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        MetricType::GAUGE,
    ),
    (
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        MetricType::GAUGE,
    ),
    (
        "process_open_fds",
        "Number of open file descriptors.",
        MetricType::GAUGE,
    ),
    (
        "process_max_fds",
        "Maximum number of open file descriptors.",
        MetricType::GAUGE,
    ),
    (
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        MetricType::GAUGE,
    ),
    (
        "process_threads",
        "Number of OS threads in the process.",
        MetricType::GAUGE,
    ),
];

impl ProcessCollector {
    /// A collector for the calling process.
    pub(crate) fn new() -> ProcessCollector {
        let descs = SERIES
            .iter()
            .filter_map(|(name, help, _)| {
                Desc::new(
                    name.to_string(),
                    help.to_string(),
                    vec![],
                    Default::default(),
                )
                .ok()
            })
            .collect();
        ProcessCollector { descs }
    }
}

impl Default for ProcessCollector {
    fn default() -> Self {
        ProcessCollector::new()
    }
}

/// What `/proc/self` says about this process right now.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// User + system CPU seconds.
    pub cpu_seconds: f64,
    /// Resident set size in bytes.
    pub resident_bytes: f64,
    /// Virtual size in bytes.
    pub virtual_bytes: f64,
    /// Open file descriptors.
    pub open_fds: f64,
    /// Soft limit on open file descriptors.
    pub max_fds: f64,
    /// Start time, Unix seconds.
    pub start_time: f64,
    /// Number of threads.
    pub threads: f64,
}

impl ProcessStats {
    /// Reads `/proc/self`; fields that cannot be read are 0.
    pub fn read() -> ProcessStats {
        let mut s = ProcessStats::default();
        let ticks = crate::proc_self::clock_ticks() as f64;
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            let fields = stat_fields(&stat);
            // Numbered as in proc(5): utime 14, stime 15, threads 20, starttime 22,
            // vsize 23.
            let num = |n: usize| stat_field::<f64>(&fields, n).unwrap_or(0.0);
            s.cpu_seconds = (num(14) + num(15)) / ticks;
            s.threads = num(20);
            s.virtual_bytes = num(23);
            s.start_time = boot_time() + num(22) / ticks;
        }
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            for line in status.lines() {
                if let Some(kb) = line.strip_prefix("VmRSS:") {
                    let kb: f64 = kb
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse()
                        .unwrap_or(0.0);
                    s.resident_bytes = kb * 1024.0;
                }
            }
        }
        s.open_fds = std::fs::read_dir("/proc/self/fd")
            .map(|d| d.count() as f64)
            .unwrap_or(0.0);
        if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
            if let Some(line) = limits.lines().find(|l| l.starts_with("Max open files")) {
                s.max_fds = line
                    .split_whitespace()
                    .nth(3)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0.0);
            }
        }
        s
    }
}

fn boot_time() -> f64 {
    std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|stat| {
            stat.lines()
                .find_map(|l| l.strip_prefix("btime "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0.0)
}

impl Collector for ProcessCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let s = ProcessStats::read();
        let values = [
            s.cpu_seconds,
            s.resident_bytes,
            s.virtual_bytes,
            s.open_fds,
            s.max_fds,
            s.start_time,
            s.threads,
        ];
        SERIES
            .iter()
            .zip(values)
            .map(|((name, help, kind), value)| {
                let mut metric = Metric::default();
                if *kind == MetricType::COUNTER {
                    let mut c = Counter::default();
                    c.set_value(value);
                    metric.set_counter(c);
                } else {
                    let mut g = Gauge::default();
                    g.set_value(value);
                    metric.set_gauge(g);
                }
                let mut family = MetricFamily::default();
                family.set_name(name.to_string());
                family.set_help(help.to_string());
                family.set_field_type(*kind);
                family.set_metric(vec![metric]);
                family
            })
            .collect()
    }
}
