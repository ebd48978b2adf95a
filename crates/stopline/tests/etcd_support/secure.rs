//! A TLS etcd for the locked-plane tests: a CA, server and client certificates made with the
//! `openssl` CLI (Debian's), one member demanding client certificates, and the `[etcd]` section
//! a host uses to reach it (optionally as an etcd user with a 0600 password file).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use stopline_etcd::access::{Access, Password};
use stopline_etcd::{EtcdClient, EtcdTarget};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl runs (Debian's openssl package)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, in `dir`.
fn certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=stopline-test-ca",
    ]);
    openssl(dir, &ca);
    for (name, cn, ext) in [
        (
            "server",
            "127.0.0.1",
            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
        ),
        ("client", "stopline-client", "extendedKeyUsage=clientAuth\n"),
    ] {
        let mut req = vec!["req"];
        req.extend(ec);
        let (key, csr, pem, extfile) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        let subj = format!("/CN={cn}");
        req.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(dir, &req);
        std::fs::write(dir.join(&extfile), ext).unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "2",
                "-extfile",
                &extfile,
            ],
        );
    }
}

/// One etcd member speaking only TLS, demanding client certificates.
pub struct SecureEtcd {
    dir: std::rc::Rc<tempfile::TempDir>,
    child: Child,
    port: u16,
}

impl SecureEtcd {
    pub fn start() -> SecureEtcd {
        let dir = std::rc::Rc::new(tempfile::tempdir().unwrap());
        certificates(dir.path());
        for _ in 0..3 {
            let port = stopline_testkit::http::free_port().unwrap();
            let peer = stopline_testkit::http::free_port().unwrap();
            let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
            let client_url = format!("https://127.0.0.1:{port}");
            let peer_url = format!("http://127.0.0.1:{peer}");
            let p = |f: &str| dir.path().join(f);
            let child = Command::new(crate::cluster::ETCD)
                .args(["--name", "m0"])
                .arg("--data-dir")
                .arg(p("data"))
                .args(["--listen-client-urls", &client_url])
                .args(["--advertise-client-urls", &client_url])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("m0={peer_url}")])
                .arg("--cert-file")
                .arg(p("server.pem"))
                .arg("--key-file")
                .arg(p("server.key"))
                .arg("--trusted-ca-file")
                .arg(p("ca.pem"))
                .arg("--client-cert-auth")
                .env("ETCD_UNSUPPORTED_ARCH", std::env::consts::ARCH)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("etcd starts");
            let mut etcd = SecureEtcd {
                dir: dir.clone(),
                child,
                port,
            };
            if etcd.ready() {
                return etcd;
            }
            // Dropped: killed by its pid; the next start takes other ports.
        }
        panic!(
            "a TLS etcd did not start three times: {}",
            std::fs::read_to_string(dir.path().join("etcd.log")).unwrap_or_default()
        );
    }

    /// True once a TLS client answers (the member has a leader).
    pub fn ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return false;
            }
            if self
                .client(None)
                .call("ready", |mut c| async move {
                    c.get("ready", None).await.map(|_| ())
                })
                .is_ok()
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    pub fn url(&self, prefix: &str) -> String {
        format!("etcds://127.0.0.1:{}?prefix={prefix}", self.port)
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A raw client with this CA and the client certificate, as `user` (or as no one).
    pub fn client(&self, user: Option<(&str, &str)>) -> EtcdClient {
        let read = |f: &str| std::fs::read(self.file(f)).unwrap();
        let tls = stopline_etcd::etcd_client::TlsOptions::new()
            .ca_certificate(stopline_etcd::etcd_client::Certificate::from_pem(read(
                "ca.pem",
            )))
            .identity(stopline_etcd::etcd_client::Identity::from_pem(
                read("client.pem"),
                read("client.key"),
            ));
        let access = Access {
            tls: Some(tls),
            user: user.map(|(u, p)| (u.to_string(), Password::new(p))),
        };
        EtcdClient::with_access(EtcdTarget::parse(&self.url("/raw")).unwrap(), access).unwrap()
    }

    /// The `[etcd]` section for a host, as `user` with the password in a 0600 file.
    pub fn config(&self, user: Option<(&str, &str)>) -> String {
        let mut text = format!(
            "[etcd]\nca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\n",
            self.file("ca.pem"),
            self.file("client.pem"),
            self.file("client.key")
        );
        if let Some((user, password)) = user {
            let file = self.password_file(user, password);
            text.push_str(&format!("user = {user:?}\npassword_file = {file:?}\n"));
        }
        text
    }

    pub fn password_file(&self, user: &str, password: &str) -> PathBuf {
        let file = self.file(&format!("{user}.password"));
        std::fs::write(&file, format!("{password}\n")).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        file
    }
}

impl SecureEtcd {
    /// Kill the member (by its pid) and wait for it: etcd is now unreachable.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SecureEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
