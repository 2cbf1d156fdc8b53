//! Where the endpoint listens: loopback unless the operator names another address.

use std::net::{Ipv4Addr, SocketAddr};

use crate::error::MetricsError;

/// Reads `--metrics`' value (or the config key's): a port alone (`9464`, `:9464`) listens on
/// 127.0.0.1; `HOST:PORT` with an IP address (`0.0.0.0:9464`, `[::1]:9464`) listens there.
pub fn parse_metrics_address(text: &str) -> Result<SocketAddr, MetricsError> {
    let text = text.trim();
    let port = text.strip_prefix(':').unwrap_or(text);
    if let Ok(port) = port.parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    text.parse().map_err(|_| MetricsError::BadAddress {
        text: text.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_alone_is_loopback() {
        for text in ["9464", ":9464", " 9464 "] {
            assert_eq!(
                parse_metrics_address(text).unwrap(),
                "127.0.0.1:9464".parse().unwrap()
            );
        }
    }

    #[test]
    fn a_named_address_is_kept() {
        for text in ["0.0.0.0:9464", "[::1]:0", "10.1.2.3:80"] {
            assert_eq!(parse_metrics_address(text).unwrap(), text.parse().unwrap());
        }
    }

    #[test]
    fn anything_else_is_refused_with_the_text() {
        for text in ["", "localhost:9464", "99999", "1.2.3.4", "abc"] {
            let err = parse_metrics_address(text).unwrap_err();
            assert!(err.to_string().contains(text.trim()), "{err}");
        }
    }
}
