//! The `--control` URL: `etcd://HOST:PORT[,HOST:PORT…][?prefix=/stopline]`.
//!
//! Parsing is strict: an unknown scheme, an empty endpoint list, an endpoint without a port, an
//! unknown query key or a prefix that is not an absolute path is refused before anything
//! connects, so a typo can never silently select a different (empty) control plane.

use stopline_core::{Refusal, RefusalCode};

/// The prefix used when the URL names none.
pub const DEFAULT_PREFIX: &str = "/stopline";

/// Where the distributed control plane lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTarget {
    /// `http://HOST:PORT` for each member, in the order given.
    pub endpoints: Vec<String>,
    /// The key prefix every name lives under (no trailing `/`).
    pub prefix: String,
}

/// Why a `--control` URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--control {url:?}: {why}")]
pub struct UrlError {
    /// The URL as given.
    pub url: String,
    /// What is wrong with it.
    pub why: String,
}

impl From<UrlError> for Refusal {
    fn from(error: UrlError) -> Refusal {
        Refusal::new(RefusalCode::DistributedUnavailable, error.to_string())
    }
}

impl EtcdTarget {
    /// Parse a `--control` URL.
    pub fn parse(url: &str) -> Result<EtcdTarget, UrlError> {
        let refuse = |why: &str| UrlError {
            url: url.to_string(),
            why: why.to_string(),
        };
        let rest = url
            .strip_prefix("etcd://")
            .ok_or_else(|| refuse("only etcd://HOST:PORT[,HOST:PORT…][?prefix=/p] is supported"))?;
        let (hosts, query) = match rest.split_once('?') {
            Some((hosts, query)) => (hosts, Some(query)),
            None => (rest, None),
        };
        let hosts = hosts.trim_end_matches('/');
        let mut endpoints = Vec::new();
        for host in hosts.split(',') {
            let host = host.trim();
            let (name, port) = host
                .rsplit_once(':')
                .ok_or_else(|| refuse("every member needs HOST:PORT"))?;
            if name.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
                return Err(refuse(
                    "every member needs HOST:PORT with a port in 1..=65535",
                ));
            }
            endpoints.push(format!("http://{host}"));
        }
        let mut prefix = DEFAULT_PREFIX.to_string();
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            match pair.split_once('=') {
                Some(("prefix", value)) => prefix = value.to_string(),
                _ => return Err(refuse("the only query key is prefix=/PATH")),
            }
        }
        let prefix = prefix.trim_end_matches('/').to_string();
        if !prefix.starts_with('/') || prefix.contains("//") || prefix.contains("..") {
            return Err(refuse("prefix must be an absolute path such as /stopline"));
        }
        Ok(EtcdTarget { endpoints, prefix })
    }

    /// The URL in its canonical form (for receipts and status).
    pub fn display(&self) -> String {
        let hosts: Vec<&str> = self
            .endpoints
            .iter()
            .map(|e| e.trim_start_matches("http://"))
            .collect();
        format!("etcd://{}?prefix={}", hosts.join(","), self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_and_prefix_are_parsed() {
        let t = EtcdTarget::parse("etcd://127.0.0.1:2379,10.0.0.2:2379?prefix=/a/b/").unwrap();
        assert_eq!(
            t.endpoints,
            ["http://127.0.0.1:2379", "http://10.0.0.2:2379"]
        );
        assert_eq!(t.prefix, "/a/b");
        let t = EtcdTarget::parse("etcd://localhost:2379").unwrap();
        assert_eq!(t.prefix, DEFAULT_PREFIX);
        assert_eq!(t.display(), "etcd://localhost:2379?prefix=/stopline");
    }

    #[test]
    fn anything_doubtful_is_refused() {
        for bad in [
            "http://127.0.0.1:2379",
            "etcd://",
            "etcd://host",
            "etcd://host:0",
            "etcd://host:99999",
            "etcd://:2379",
            "etcd://h:1?prefx=/a",
            "etcd://h:1?prefix=relative",
            "etcd://h:1?prefix=/a/../b",
        ] {
            assert!(EtcdTarget::parse(bad).is_err(), "{bad}");
        }
    }
}
