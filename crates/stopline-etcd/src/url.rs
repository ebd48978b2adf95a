//! The `--control` URL: `etcd://HOST:PORT[,HOST:PORT…][?prefix=/stopline]`, or `etcds://…` for
//! TLS (the CA and client certificate come from `[etcd]` in `config.toml`).
//!
//! Parsing is strict: an unknown scheme, an empty endpoint list, an endpoint without a port, an
//! unknown query key or a prefix that is not an absolute path is refused before anything
//! connects, so a typo can never silently select a different (empty) control plane. Credentials
//! written into the URL (`user:password@`) are `config_invalid` and never echoed: a URL is seen
//! in `ps`, shell history and receipts; the password comes only from `[etcd] password_file`.

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
    /// `etcds://`: every member is spoken to over TLS (`https://HOST:PORT`).
    pub tls: bool,
}

/// Why a `--control` URL was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--control {url:?}: {why}")]
pub struct UrlError {
    /// The URL as given.
    pub url: String,
    /// What is wrong with it.
    pub why: String,
    /// The refusal it is: `config_invalid` for credentials in the URL, else
    /// `distributed_unavailable`.
    pub code: RefusalCode,
}

impl From<UrlError> for Refusal {
    fn from(error: UrlError) -> Refusal {
        Refusal::new(error.code, error.to_string())
    }
}

impl EtcdTarget {
    /// Parse a `--control` URL.
    pub fn parse(url: &str) -> Result<EtcdTarget, UrlError> {
        let refuse = |why: &str| UrlError {
            url: url.to_string(),
            why: why.to_string(),
            code: RefusalCode::DistributedUnavailable,
        };
        let (rest, tls) = match (url.strip_prefix("etcd://"), url.strip_prefix("etcds://")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => return Err(refuse(
                "only etcd://HOST:PORT[,HOST:PORT…][?prefix=/p] (or etcds:// for TLS) is supported",
            )),
        };
        let (hosts, query) = match rest.split_once('?') {
            Some((hosts, query)) => (hosts, Some(query)),
            None => (rest, None),
        };
        if hosts.contains('@') {
            // Never echo what was before the `@`: it may be a password.
            return Err(UrlError {
                url: format!(
                    "{}://<credentials removed>@…",
                    if tls { "etcds" } else { "etcd" }
                ),
                why: "credentials are never taken from the URL (it shows in ps, shell history and receipts): set [etcd] user and password_file in config.toml".into(),
                code: RefusalCode::ConfigInvalid,
            });
        }
        let scheme = if tls { "https" } else { "http" };
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
            endpoints.push(format!("{scheme}://{host}"));
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
        Ok(EtcdTarget {
            endpoints,
            prefix,
            tls,
        })
    }

    /// The URL in its canonical form (for receipts and status).
    pub fn display(&self) -> String {
        let hosts: Vec<&str> = self
            .endpoints
            .iter()
            .map(|e| e.split_once("://").map_or(e.as_str(), |(_, h)| h))
            .collect();
        let scheme = if self.tls { "etcds" } else { "etcd" };
        format!("{scheme}://{}?prefix={}", hosts.join(","), self.prefix)
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
        let t = EtcdTarget::parse("etcds://a:2379,b:2379").unwrap();
        assert!(t.tls);
        assert_eq!(t.endpoints, ["https://a:2379", "https://b:2379"]);
        assert_eq!(t.display(), "etcds://a:2379,b:2379?prefix=/stopline");
    }

    #[test]
    fn credentials_in_the_url_are_config_invalid_and_never_echoed() {
        for url in [
            "etcd://alice:s3cret@h:2379",
            "etcds://alice:s3cret@h:2379?prefix=/p",
        ] {
            let error = EtcdTarget::parse(url).unwrap_err();
            assert_eq!(error.code, RefusalCode::ConfigInvalid);
            let text = Refusal::from(error).message;
            assert!(
                !text.contains("s3cret") && !text.contains("alice"),
                "{text}"
            );
        }
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
