//! The endpoint against well-behaved and hostile clients, spoken to over raw TCP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_metrics::{
    LatencyHistogram, MetricsServer, Scrape, Unit, HEAD_TIME, MAX_CONNECTIONS, MAX_REQUEST_HEAD,
};

/// A server whose one counter counts its scrapes, beside a gauge and a histogram.
fn server() -> (MetricsServer, Arc<AtomicU64>) {
    let scrapes = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&scrapes);
    let latency = LatencyHistogram::default();
    latency.observe(Duration::from_millis(3));
    let source = move |scrape: &mut Scrape| {
        let n = counted.fetch_add(1, Ordering::Relaxed) + 1;
        scrape.counter("test_scrapes", "Scrapes answered.", None, [(vec![], n)]);
        scrape.gauge(
            "test_stored",
            "Bytes stored.",
            Some(Unit::Bytes),
            [(vec![("target", "0".to_owned())], 42.0)],
        );
        scrape.histogram("test_latency", "Latency.", [(vec![], latency.snapshot())]);
    };
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), Arc::new(source)).unwrap();
    (server, scrapes)
}

/// Sends `request` and reads the answer until the server closes: the status code (0 when
/// the connection closed without one) and the whole text.
fn exchange(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = stream.write_all(request);
    let mut text = Vec::new();
    let _ = stream.read_to_end(&mut text);
    let text = String::from_utf8_lossy(&text).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text)
}

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    exchange(addr, request.as_bytes())
}

#[test]
fn a_scrape_answers_the_series_in_prometheus_text() {
    let (server, _) = server();
    let (status, text) = get(server.local_addr(), "/metrics");
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("text/plain; version=0.0.4"), "{text}");
    assert!(
        text.contains("# TYPE test_scrapes_total counter\ntest_scrapes_total 1\n"),
        "{text}"
    );
    assert!(
        text.contains("test_stored_bytes{target=\"0\"} 42"),
        "{text}"
    );
    assert!(
        text.contains("test_latency_seconds_bucket{le=\"0.0025\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("test_latency_seconds_bucket{le=\"0.005\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("test_latency_seconds_bucket{le=\"+Inf\"} 1\n"),
        "{text}"
    );
    assert!(text.contains("test_latency_seconds_count 1\n"), "{text}");
}

#[test]
fn other_paths_and_methods_are_refused() {
    let (server, scrapes) = server();
    assert_eq!(get(server.local_addr(), "/").0, 404);
    let post =
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    let (status, text) = exchange(server.local_addr(), post);
    assert_eq!(status, 405, "{text}");
    assert_eq!(scrapes.load(Ordering::Relaxed), 0);
}

#[test]
fn concurrent_scrapes_are_all_answered() {
    let (server, scrapes) = server();
    let addr = server.local_addr();
    // Half the slots: a client's next connection may come before the server has let go of
    // its last one's slot.
    let clients = MAX_CONNECTIONS / 2;
    std::thread::scope(|s| {
        for _ in 0..clients {
            s.spawn(move || {
                for _ in 0..25 {
                    let (status, text) = get(addr, "/metrics");
                    assert_eq!(status, 200, "{text}");
                }
            });
        }
    });
    assert_eq!(scrapes.load(Ordering::Relaxed), 25 * clients as u64);
}

#[test]
fn slow_clients_are_cut_off_and_scrapes_go_on() {
    let (server, _) = server();
    let addr = server.local_addr();
    // Every slot taken by a client that never finishes its request head.
    let start = Instant::now();
    let slow: Vec<TcpStream> = (0..MAX_CONNECTIONS)
        .map(|_| {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.write_all(b"GET /metrics HTTP/1.1\r\nHo").unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // One more is closed at once, unanswered.
    assert_eq!(get(addr, "/metrics").0, 0);
    for mut stream in slow {
        stream.set_read_timeout(Some(HEAD_TIME * 3)).unwrap();
        let mut rest = Vec::new();
        // Closed (with or without a 408) within the head's time, not left hanging.
        stream
            .read_to_end(&mut rest)
            .expect("the slow client was cut off");
    }
    assert!(start.elapsed() < HEAD_TIME * 3, "{:?}", start.elapsed());
    assert_eq!(get(addr, "/metrics").0, 200);
}

#[test]
fn a_huge_request_is_refused_unread_and_scrapes_go_on() {
    let (server, scrapes) = server();
    let addr = server.local_addr();
    let mut request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ".to_vec();
    request.resize(MAX_REQUEST_HEAD * 64, b'a');
    let (status, text) = exchange(addr, &request);
    assert!(status == 431 || status == 0, "{status}: {text}");
    assert_eq!(scrapes.load(Ordering::Relaxed), 0);
    assert_eq!(get(addr, "/metrics").0, 200);
}

#[test]
fn garbage_is_refused_and_scrapes_go_on() {
    let (server, scrapes) = server();
    let addr = server.local_addr();
    let garbage: Vec<u8> = (0..4096u32).map(|i| (i * 7919 % 251) as u8).collect();
    let (status, text) = exchange(addr, &garbage);
    assert!(status == 400 || status == 0, "{status}: {text}");
    let (status, text) = exchange(addr, b"\r\n\r\nHELLO\r\n\r\n");
    assert!(status == 400 || status == 0, "{status}: {text}");
    assert_eq!(scrapes.load(Ordering::Relaxed), 0);
    assert_eq!(get(addr, "/metrics").0, 200);
}

#[test]
fn binding_a_taken_port_is_a_clear_error() {
    let (server, _) = server();
    let err = MetricsServer::start(server.local_addr(), Arc::new(|_: &mut Scrape| {}))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&server.local_addr().to_string()), "{err}");
}
