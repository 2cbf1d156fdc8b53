//! etcd through its v3 JSON gateway (`POST /v3/kv/put`, `/v3/lease/grant`, ...), over hyper's
//! HTTP/1 client.
//!
//! Why not gRPC: crates.io's `etcd-client` generates its stubs with `protoc` when it builds,
//! which a fresh machine with only the Rust toolchain lacks, and building Tandem must need
//! nothing more. The gateway is part of every etcd since 3.3 and takes the same requests as
//! JSON (keys and values base64, 64-bit integers as strings); hyper and tokio are already in
//! the build for the metrics endpoint. The few calls a node makes (a lease, its record, a
//! look-up per fetch) are milliseconds either way.
//!
//! Every call tries the endpoints in order and fails with [`EtcdError::Unavailable`] when
//! none answers within [`CALL_TIMEOUT`].

use std::sync::Mutex;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{json, Value};

/// The longest one call may take at one endpoint.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// Why an etcd call failed.
#[derive(Debug)]
pub(crate) enum EtcdError {
    /// No endpoint answered (refused, timed out, or not HTTP).
    Unavailable(String),
    /// etcd answered with an error.
    Refused(String),
}

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unavailable(why) => write!(f, "etcd is unreachable: {why}"),
            Self::Refused(why) => write!(f, "etcd refused: {why}"),
        }
    }
}

/// A client of one etcd cluster (its client URLs).
pub(crate) struct Etcd {
    /// `host:port` of each endpoint.
    endpoints: Vec<String>,
    /// One call at a time: calls are rare (a keep-alive every few seconds, a look-up per
    /// fetch) and a current-thread runtime serves them.
    runtime: Mutex<tokio::runtime::Runtime>,
}

/// `host:port` of an `http://host:port` URL (a bare `host:port` too).
pub(crate) fn endpoint_address(url: &str) -> Result<String, String> {
    let rest = if let Some(rest) = url.strip_prefix("http://") {
        rest
    } else if url.contains("://") {
        return Err(format!(
            "etcd endpoint {url:?}: only http:// is spoken (the JSON gateway over plain HTTP)"
        ));
    } else {
        url
    };
    let address = rest.trim_end_matches('/');
    if address.is_empty() || address.contains('/') || !address.contains(':') {
        return Err(format!("etcd endpoint {url:?} is not http://host:port"));
    }
    Ok(address.to_owned())
}

/// A 64-bit integer of a gateway answer: a string (the gateway's form) or a number.
fn int(value: &Value) -> Option<i64> {
    match value {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

impl Etcd {
    /// A client of the etcd at `endpoints` (`http://host:port` each); nothing is sent yet.
    pub(crate) fn new(endpoints: &[String]) -> Result<Self, String> {
        if endpoints.is_empty() {
            return Err("no etcd endpoints".into());
        }
        let endpoints = endpoints
            .iter()
            .map(|url| endpoint_address(url))
            .collect::<Result<_, _>>()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| format!("a runtime for etcd calls: {e}"))?;
        Ok(Self {
            endpoints,
            runtime: Mutex::new(runtime),
        })
    }

    /// `POST path` with `body` at the first endpoint that answers; the answer's JSON.
    fn call(&self, path: &str, body: &Value) -> Result<Value, EtcdError> {
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let body = body.to_string();
        let mut why = Vec::new();
        for endpoint in &self.endpoints {
            let answer = runtime.block_on(async {
                tokio::time::timeout(CALL_TIMEOUT, post(endpoint, path, body.clone())).await
            });
            match answer {
                Ok(Ok((200, answer))) => {
                    return serde_json::from_slice(&answer).map_err(|e| {
                        EtcdError::Refused(format!("{path}: an answer that is not JSON: {e}"))
                    })
                }
                Ok(Ok((status, answer))) => {
                    let message = serde_json::from_slice::<Value>(&answer)
                        .ok()
                        .and_then(|v| v.get("message").and_then(Value::as_str).map(String::from))
                        .unwrap_or_else(|| String::from_utf8_lossy(&answer).into_owned());
                    return Err(EtcdError::Refused(format!("{path}: {status} {message}")));
                }
                Ok(Err(e)) => why.push(format!("{endpoint}: {e}")),
                Err(_) => why.push(format!("{endpoint}: no answer within {CALL_TIMEOUT:?}")),
            }
        }
        Err(EtcdError::Unavailable(why.join("; ")))
    }

    /// A new lease of `ttl` seconds; its id.
    pub(crate) fn grant(&self, ttl: u64) -> Result<i64, EtcdError> {
        let answer = self.call("/v3/lease/grant", &json!({ "TTL": ttl.to_string() }))?;
        answer
            .get("ID")
            .and_then(int)
            .ok_or_else(|| EtcdError::Refused(format!("a lease grant without an id: {answer}")))
    }

    /// Renews `lease`; the seconds it has left, 0 when it had expired.
    pub(crate) fn keep_alive(&self, lease: i64) -> Result<i64, EtcdError> {
        let answer = self.call("/v3/lease/keepalive", &json!({ "ID": lease.to_string() }))?;
        // The gateway streams keep-alive answers, one JSON object under "result".
        let result = answer.get("result").unwrap_or(&answer);
        Ok(result.get("TTL").and_then(int).unwrap_or(0))
    }

    /// Revokes `lease`: every key under it goes.
    pub(crate) fn revoke(&self, lease: i64) -> Result<(), EtcdError> {
        self.call("/v3/lease/revoke", &json!({ "ID": lease.to_string() }))
            .map(drop)
    }

    /// Puts `key` = `value`, under `lease`.
    pub(crate) fn put(&self, key: &str, value: &[u8], lease: i64) -> Result<(), EtcdError> {
        let body = json!({
            "key": BASE64.encode(key),
            "value": BASE64.encode(value),
            "lease": lease.to_string(),
        });
        self.call("/v3/kv/put", &body).map(drop)
    }

    /// The value of `key`, if it has one.
    pub(crate) fn get(&self, key: &str) -> Result<Option<Vec<u8>>, EtcdError> {
        let answer = self.call("/v3/kv/range", &json!({ "key": BASE64.encode(key) }))?;
        Ok(Self::pairs(&answer).into_iter().next().map(|(_, v)| v))
    }

    /// Every key under `prefix`, with its value, in key order.
    pub(crate) fn get_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, EtcdError> {
        // The range's end: the prefix with its last byte one higher.
        let mut end = prefix.as_bytes().to_vec();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let body = json!({
            "key": BASE64.encode(prefix),
            "range_end": BASE64.encode(end),
        });
        Ok(Self::pairs(&self.call("/v3/kv/range", &body)?))
    }

    fn pairs(answer: &Value) -> Vec<(String, Vec<u8>)> {
        let decode = |v: Option<&Value>| {
            v.and_then(Value::as_str)
                .and_then(|s| BASE64.decode(s).ok())
                .unwrap_or_default()
        };
        answer
            .get("kvs")
            .and_then(Value::as_array)
            .map(|kvs| {
                kvs.iter()
                    .map(|kv| {
                        let key = String::from_utf8_lossy(&decode(kv.get("key"))).into_owned();
                        (key, decode(kv.get("value")))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Deletes `key`.
    pub(crate) fn delete(&self, key: &str) -> Result<(), EtcdError> {
        self.call("/v3/kv/deleterange", &json!({ "key": BASE64.encode(key) }))
            .map(drop)
    }
}

/// One `POST` of JSON on a connection of its own: the status and body.
async fn post(endpoint: &str, path: &str, body: String) -> Result<(u16, Bytes), String> {
    let stream = tokio::net::TcpStream::connect(endpoint)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(connection);
    let request = hyper::Request::post(path)
        .header(hyper::header::HOST, endpoint)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    driver.abort();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_plain_http_host_and_port() {
        assert_eq!(
            endpoint_address("http://127.0.0.1:2379/").unwrap(),
            "127.0.0.1:2379"
        );
        assert_eq!(endpoint_address("etcd:2379").unwrap(), "etcd:2379");
        assert!(endpoint_address("https://etcd:2379")
            .unwrap_err()
            .contains("only http://"));
        assert!(endpoint_address("http://etcd").is_err());
        assert!(endpoint_address("http://etcd:2379/v3").is_err());
    }

    #[test]
    fn an_etcd_nobody_serves_is_unavailable() {
        // A port just freed: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let etcd = Etcd::new(&[format!("http://127.0.0.1:{port}")]).unwrap();
        assert!(matches!(etcd.grant(5), Err(EtcdError::Unavailable(_))));
    }
}
