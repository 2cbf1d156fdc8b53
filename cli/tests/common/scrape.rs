//! The services' metrics endpoints, seen by a test: a free port, a scrape, a series' value.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A loopback address with a port nobody listens on now (the service binds it next).
pub fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("its address")
}

/// `GET path` on `addr` (Connection: close): the status code and the body.
pub fn try_http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Ok((status, body))
}

/// [`try_http_get`], which must reach the server.
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    try_http_get(addr, path).unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"))
}

/// The series text of a scrape, which must succeed.
pub fn scrape(addr: SocketAddr) -> String {
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of `series` (name and labels exactly as exposed) in `text`, if present.
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .find_map(|v| v.trim().parse().ok())
}

/// Scrapes until `series` reads `want` (the status block is refreshed every 100 ms), or fails
/// after 10 s with the last scrape.
pub fn wait_for(addr: SocketAddr, series: &str, want: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = scrape(addr);
        if value(&text, series) == Some(want) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{series} never read {want}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
