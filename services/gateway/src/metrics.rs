//! The gateway's counters and gauges, rendered in the Prometheus text format at `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Shared counters. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Metrics {
    inner: Arc<MetricsInner>,
}

#[derive(Debug)]
struct MetricsInner {
    websockets_open: AtomicU64,
    websockets_opened: AtomicU64,
    websocket_resumes: AtomicU64,
    attach_streams_open: AtomicU64,
    streams_open: AtomicU64,
    bytes_to_clients: AtomicU64,
    bytes_from_clients: AtomicU64,
    /// Indexed by status code minus 100.
    http_responses: [AtomicU64; 500],
    /// Requests to each deprecated route, by method and route template. A map behind a lock
    /// rather than atomics: the routes are few and their use rare, and only the routes used
    /// appear.
    legacy_requests: Mutex<BTreeMap<(String, String), u64>>,
}

impl Default for MetricsInner {
    fn default() -> Self {
        Self {
            websockets_open: AtomicU64::new(0),
            websockets_opened: AtomicU64::new(0),
            websocket_resumes: AtomicU64::new(0),
            attach_streams_open: AtomicU64::new(0),
            streams_open: AtomicU64::new(0),
            bytes_to_clients: AtomicU64::new(0),
            bytes_from_clients: AtomicU64::new(0),
            http_responses: std::array::from_fn(|_| AtomicU64::new(0)),
            legacy_requests: Mutex::new(BTreeMap::new()),
        }
    }
}

impl Metrics {
    /// Counts an open WebSocket until the returned guard is dropped. `resumed` is true for an
    /// open with `since`, which is a client reconnecting.
    pub fn websocket_opened(&self, resumed: bool) -> GaugeGuard {
        self.inner.websockets_opened.fetch_add(1, Ordering::Relaxed);
        if resumed {
            self.inner.websocket_resumes.fetch_add(1, Ordering::Relaxed);
        }
        GaugeGuard::new(self.clone(), Gauge::WebSockets)
    }

    /// Counts an open broker `Attach` stream until the returned guard is dropped.
    pub fn attach_stream_opened(&self) -> GaugeGuard {
        GaugeGuard::new(self.clone(), Gauge::AttachStreams)
    }

    /// Counts one of a principal's open streams or waits, on any surface
    /// ([`crate::streams::StreamRegistry`]), until the returned guard is dropped.
    pub fn stream_opened(&self) -> GaugeGuard {
        GaugeGuard::new(self.clone(), Gauge::Streams)
    }

    pub fn bytes_to_client(&self, count: usize) {
        self.inner
            .bytes_to_clients
            .fetch_add(count as u64, Ordering::Relaxed);
    }

    pub fn bytes_from_client(&self, count: usize) {
        self.inner
            .bytes_from_clients
            .fetch_add(count as u64, Ordering::Relaxed);
    }

    pub fn http_response(&self, status: u16) {
        if let Some(counter) = status
            .checked_sub(100)
            .and_then(|index| self.inner.http_responses.get(usize::from(index)))
        {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts a request to a deprecated route (docs/CONTRACT.md, "Legacy routes"): `route` is the
    /// route's template, as the router matched it, so that ids do not make a series each.
    pub fn legacy_request(&self, method: &str, route: &str) {
        let mut counts = self
            .inner
            .legacy_requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *counts
            .entry((method.to_owned(), route.to_owned()))
            .or_default() += 1;
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let inner = &self.inner;
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, value) in samples {
                let _ = writeln!(out, "{name}{labels} {value}");
            }
        };
        metric(
            "ptyhub_gateway_websockets_open",
            "gauge",
            "Terminal WebSockets open now.",
            &[("", inner.websockets_open.load(Ordering::Relaxed))],
        );
        metric(
            "ptyhub_gateway_websockets_opened_total",
            "counter",
            "Terminal WebSockets opened.",
            &[("", inner.websockets_opened.load(Ordering::Relaxed))],
        );
        metric(
            "ptyhub_gateway_websocket_reconnects_total",
            "counter",
            "Terminal WebSockets opened with `since`, resuming an earlier connection.",
            &[("", inner.websocket_resumes.load(Ordering::Relaxed))],
        );
        metric(
            "ptyhub_gateway_attach_streams_open",
            "gauge",
            "Broker Attach streams open now.",
            &[("", inner.attach_streams_open.load(Ordering::Relaxed))],
        );
        metric(
            "ptyhub_gateway_streams_open",
            "gauge",
            "Long-lived requests open now on every surface (terminal WebSockets, relayed Attach streams, event streams, screen waits), each holding a slot of its credential's.",
            &[("", inner.streams_open.load(Ordering::Relaxed))],
        );
        metric(
            "ptyhub_gateway_terminal_bytes_total",
            "counter",
            "Terminal bytes relayed, by direction.",
            &[
                (
                    "{direction=\"to_client\"}",
                    inner.bytes_to_clients.load(Ordering::Relaxed),
                ),
                (
                    "{direction=\"from_client\"}",
                    inner.bytes_from_clients.load(Ordering::Relaxed),
                ),
            ],
        );
        let statuses: Vec<(String, u64)> = inner
            .http_responses
            .iter()
            .enumerate()
            .filter_map(|(index, counter)| {
                let value = counter.load(Ordering::Relaxed);
                (value > 0).then(|| (format!("{{status=\"{}\"}}", index + 100), value))
            })
            .collect();
        let statuses: Vec<(&str, u64)> = statuses
            .iter()
            .map(|(labels, value)| (labels.as_str(), *value))
            .collect();
        metric(
            "ptyhub_gateway_http_responses_total",
            "counter",
            "HTTP responses, by status code.",
            &statuses,
        );
        let legacy = self.legacy_samples();
        let legacy: Vec<(&str, u64)> = legacy
            .iter()
            .map(|(labels, value)| (labels.as_str(), *value))
            .collect();
        metric(
            "ptyhub_gateway_legacy_requests_total",
            "counter",
            "Requests to deprecated routes (the project/repository layout, the legacy reset), by method and route.",
            &legacy,
        );
        out
    }
}

impl Metrics {
    /// The legacy routes' samples with their labels, in a stable order.
    fn legacy_samples(&self) -> Vec<(String, u64)> {
        let counts = self
            .inner
            .legacy_requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        counts
            .iter()
            .map(|((method, route), value)| {
                (
                    format!(
                        "{{method=\"{}\",route=\"{}\"}}",
                        label_value(method),
                        label_value(route)
                    ),
                    *value,
                )
            })
            .collect()
    }
}

/// A Prometheus label value with its backslashes, quotes and line feeds escaped.
fn label_value(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[derive(Debug, Clone, Copy)]
enum Gauge {
    WebSockets,
    AttachStreams,
    Streams,
}

/// Holds a gauge up while alive, so every exit path brings it down again.
#[derive(Debug)]
pub struct GaugeGuard {
    metrics: Metrics,
    gauge: Gauge,
}

impl GaugeGuard {
    fn new(metrics: Metrics, gauge: Gauge) -> Self {
        metrics.gauge(gauge).fetch_add(1, Ordering::Relaxed);
        Self { metrics, gauge }
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.metrics
            .gauge(self.gauge)
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    fn gauge(&self, gauge: Gauge) -> &AtomicU64 {
        match gauge {
            Gauge::WebSockets => &self.inner.websockets_open,
            Gauge::AttachStreams => &self.inner.attach_streams_open,
            Gauge::Streams => &self.inner.streams_open,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_follow_their_guards_and_counters_render() {
        let metrics = Metrics::default();
        let guard = metrics.websocket_opened(true);
        let stream = metrics.stream_opened();
        metrics.http_response(404);
        metrics.bytes_to_client(10);
        let text = metrics.render();
        assert!(text.contains("ptyhub_gateway_websockets_open 1\n"));
        assert!(text.contains("ptyhub_gateway_websocket_reconnects_total 1\n"));
        assert!(text.contains("ptyhub_gateway_streams_open 1\n"));
        assert!(text.contains("ptyhub_gateway_http_responses_total{status=\"404\"} 1\n"));
        assert!(text.contains("ptyhub_gateway_terminal_bytes_total{direction=\"to_client\"} 10\n"));
        drop(guard);
        drop(stream);
        let text = metrics.render();
        assert!(text.contains("ptyhub_gateway_websockets_open 0\n"));
        assert!(text.contains("ptyhub_gateway_streams_open 0\n"));
    }

    #[test]
    fn legacy_requests_are_counted_per_method_and_route() {
        let metrics = Metrics::default();
        let route =
            "/projects/{project_id}/repositories/{repository_id}/instances/{iid}/terminal/sessions";
        metrics.legacy_request("GET", route);
        metrics.legacy_request("GET", route);
        metrics.legacy_request("POST", route);
        let text = metrics.render();
        assert!(text.contains("# TYPE ptyhub_gateway_legacy_requests_total counter\n"));
        assert!(text.contains(&format!(
            "ptyhub_gateway_legacy_requests_total{{method=\"GET\",route=\"{route}\"}} 2\n"
        )));
        assert!(text.contains(&format!(
            "ptyhub_gateway_legacy_requests_total{{method=\"POST\",route=\"{route}\"}} 1\n"
        )));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
