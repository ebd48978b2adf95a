//! How this host reaches a locked etcd: TLS (`etcds://` with `[etcd] ca_file`, and
//! `cert_file`/`key_file` for a client certificate) and etcd authentication (`[etcd] user` with
//! `password_file`), from `config.toml` (docs/reference.md §10).
//!
//! Everything doubtful is `config_invalid` before anything connects, and no message ever holds
//! the password: a TLS setting with a plaintext `etcd://` URL (the operator meant TLS), `etcds://`
//! without a CA (this build trusts no system roots), half a client certificate, a user without a
//! password file or the reverse, a password file that others may read or that someone else owns.

use crate::url::EtcdTarget;
use etcd_client::{Certificate, Identity, TlsOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use stopline_control::config::EtcdConfig;
use stopline_core::{Refusal, RefusalCode};

/// A password, kept out of every `Debug` and message.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// A password.
    pub fn new(text: impl Into<String>) -> Password {
        Password(text.into())
    }

    /// The text, for the client's authentication call only.
    pub fn expose(&self) -> String {
        self.0.clone()
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(<withheld>)")
    }
}

/// TLS and credentials for the client (both optional: an open etcd needs neither).
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The TLS configuration (`etcds://`).
    pub tls: Option<TlsOptions>,
    /// The etcd user and password.
    pub user: Option<(String, Password)>,
}

fn invalid(why: impl Into<String>) -> Refusal {
    Refusal::new(
        RefusalCode::ConfigInvalid,
        format!("config.toml [etcd]: {}", why.into()),
    )
}

fn resolve(home: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        home.join(path)
    }
}

fn read_pem(home: &Path, key: &str, path: &Path) -> Result<Vec<u8>, Refusal> {
    let path = resolve(home, path);
    std::fs::read(&path)
        .map_err(|e| invalid(format!("{key} {} cannot be read: {e}", path.display())))
}

/// The password in `path`: mode 0600 or stricter and owned by this process's user, else
/// `config_invalid` (a password others can read is not a secret; one someone else owns can be
/// changed under us). One line; the trailing newline is not part of it.
pub fn read_password(path: &Path) -> Result<Password, Refusal> {
    let shown = path.display();
    let meta = std::fs::metadata(path)
        .map_err(|e| invalid(format!("password_file {shown} cannot be read: {e}")))?;
    if !meta.is_file() {
        return Err(invalid(format!(
            "password_file {shown} is not a regular file"
        )));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(invalid(format!(
            "password_file {shown} has mode {mode:04o}: it must be 0600 or stricter (chmod 600)"
        )));
    }
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(invalid(format!(
            "password_file {shown} is owned by uid {}, not by this user (uid {me})",
            meta.uid()
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| invalid(format!("password_file {shown} cannot be read: {e}")))?;
    let password = text.trim_end_matches(['\n', '\r']);
    if password.is_empty() || password.contains('\n') {
        return Err(invalid(format!(
            "password_file {shown} must hold the password on one line"
        )));
    }
    Ok(Password::new(password))
}

impl Access {
    /// The access `config` describes for `target`, with relative paths under `home`.
    pub fn load(config: &EtcdConfig, home: &Path, target: &EtcdTarget) -> Result<Access, Refusal> {
        let mut access = Access::default();
        let any_tls =
            config.ca_file.is_some() || config.cert_file.is_some() || config.key_file.is_some();
        if target.tls {
            let ca = config.ca_file.as_deref().ok_or_else(|| {
                invalid("etcds:// needs ca_file: the CA that signed the etcd members' certificates")
            })?;
            let mut tls = TlsOptions::new()
                .ca_certificate(Certificate::from_pem(read_pem(home, "ca_file", ca)?));
            match (&config.cert_file, &config.key_file) {
                (Some(cert), Some(key)) => {
                    tls = tls.identity(Identity::from_pem(
                        read_pem(home, "cert_file", cert)?,
                        read_pem(home, "key_file", key)?,
                    ));
                }
                (None, None) => {}
                _ => return Err(invalid("cert_file and key_file go together")),
            }
            access.tls = Some(tls);
        } else if any_tls {
            return Err(invalid(
                "ca_file, cert_file or key_file is set but --control is a plaintext etcd:// URL: use etcds:// for TLS",
            ));
        }
        match (&config.user, &config.password_file) {
            (Some(user), Some(file)) => {
                if user.is_empty() {
                    return Err(invalid("user is empty"));
                }
                let password = read_password(&resolve(home, file))?;
                access.user = Some((user.clone(), password));
            }
            (None, None) => {}
            (Some(_), None) => return Err(invalid("user needs password_file")),
            (None, Some(_)) => return Err(invalid("password_file needs user")),
        }
        Ok(access)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_settings_are_refused() {
        let plain = EtcdTarget::parse("etcd://h:1").unwrap();
        let tls = EtcdTarget::parse("etcds://h:1").unwrap();
        let home = Path::new("/nonexistent");
        let with = |f: fn(&mut EtcdConfig)| {
            let mut c = EtcdConfig::default();
            f(&mut c);
            c
        };
        for (config, target) in [
            (with(|c| c.ca_file = Some("ca.pem".into())), &plain),
            (EtcdConfig::default(), &tls),
            (with(|c| c.user = Some("u".into())), &plain),
            (with(|c| c.password_file = Some("pw".into())), &plain),
        ] {
            let refusal = Access::load(&config, home, target).unwrap_err();
            assert_eq!(refusal.code, RefusalCode::ConfigInvalid, "{config:?}");
        }
        assert!(Access::load(&EtcdConfig::default(), home, &plain).is_ok());
    }
}
