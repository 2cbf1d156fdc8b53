//! A service child that exits before its ready line: the error says how it
//! exited and what it last wrote to stderr, which still reaches this
//! process's stderr as it comes.

use std::ffi::OsStr;
use std::path::Path;

use tandem_process::ServiceChild;

#[test]
fn a_child_that_dies_before_it_is_ready_says_why() {
    let script = "for i in $(seq 1 30); do echo \"line $i\" >&2; done; echo 'bad config: no [blob] table' >&2; exit 3";
    let args: [&OsStr; 2] = ["-c".as_ref(), script.as_ref()];
    let error = ServiceChild::spawn(Path::new("/bin/sh"), &args)
        .expect_err("the child never says it is ready")
        .to_string();
    assert!(error.contains("exit status: 3"), "{error}");
    assert!(error.contains("bad config: no [blob] table"), "{error}");
    assert!(
        error.contains("line 30") && !error.contains("line 5\n"),
        "only the last lines: {error}"
    );
}

#[test]
fn a_silent_child_says_so() {
    let args: [&OsStr; 2] = ["-c".as_ref(), "exit 4".as_ref()];
    let error = ServiceChild::spawn(Path::new("/bin/sh"), &args)
        .expect_err("no ready line")
        .to_string();
    assert!(
        error.contains("exit status: 4") && error.contains("wrote nothing"),
        "{error}"
    );
}
