//! The directory watcher wakes on a new entry and reports a lost watch, so the caller reloads.

use std::time::Duration;
use stopline_supervisor::{DirWatcher, WatchEvent};

#[test]
fn a_new_entry_wakes_the_watcher_and_a_removed_directory_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let latches = dir.path().join("latches");
    std::fs::create_dir(&latches).unwrap();
    let mut watcher = DirWatcher::new(&latches).unwrap();
    assert_eq!(
        watcher.wait(Duration::from_millis(20)).unwrap(),
        WatchEvent::Timeout
    );

    std::fs::write(latches.join("latch_1.json"), "{}").unwrap();
    match watcher.wait(Duration::from_secs(5)).unwrap() {
        WatchEvent::Changed(names) => {
            assert!(names.iter().any(|n| n == "latch_1.json"), "{names:?}")
        }
        other => panic!("expected a change, got {other:?}"),
    }

    std::fs::remove_file(latches.join("latch_1.json")).unwrap();
    std::fs::remove_dir(&latches).unwrap();
    let mut saw_lost = false;
    for _ in 0..5 {
        if watcher.wait(Duration::from_secs(2)).unwrap() == WatchEvent::Lost {
            saw_lost = true;
            break;
        }
    }
    assert!(saw_lost);
    assert_eq!(
        watcher.wait(Duration::from_millis(1)).unwrap(),
        WatchEvent::Lost
    );
}

#[test]
fn the_channel_form_delivers_changes_and_ticks() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = DirWatcher::new(dir.path())
        .unwrap()
        .spawn_channel(Duration::from_millis(20))
        .unwrap();
    std::fs::write(dir.path().join("x"), "1").unwrap();
    let mut saw_change = false;
    let mut saw_tick = false;
    for _ in 0..100 {
        match receiver
            .recv_timeout(Duration::from_secs(5))
            .unwrap()
            .unwrap()
        {
            WatchEvent::Changed(_) => saw_change = true,
            WatchEvent::Timeout => saw_tick = true,
            WatchEvent::Lost => panic!("lost"),
        }
        if saw_change && saw_tick {
            break;
        }
    }
    assert!(saw_change && saw_tick);
}
