//! The etcd password comes from a private file and is never echoed (`access::read_password`).
//! Here, not in the module's unit tests, because it writes its own scratch file and only the
//! store may write files in product code (xtask's invariant scans `src/`).
#![allow(clippy::disallowed_methods)] // a test writes its own fixtures and starts processes

use std::os::unix::fs::PermissionsExt;
use stopline_core::RefusalCode;
use stopline_etcd::access::read_password;

#[test]
fn a_password_file_others_can_read_is_refused_without_echoing_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, "hunter2\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refusal = read_password(&file).unwrap_err();
    assert_eq!(refusal.code, RefusalCode::ConfigInvalid);
    assert!(refusal.message.contains("0644"), "{}", refusal.message);
    assert!(!refusal.message.contains("hunter2"));
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let password = read_password(&file).unwrap();
    assert_eq!(password.expose(), "hunter2");
    assert!(!format!("{password:?}").contains("hunter2"));
}
