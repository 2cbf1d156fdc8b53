//! The child of the two-process IPC test (see `tandem_tests::ipc`):
//! `ipc_child <backend> <mode> <args...>`, exit status 0 on success.

tandem_tests::child_process_main!("ipc_child", tandem_tests::ipc::child_main);
