//! The runtime and the clients of the client device queue tests (see
//! `tandem_tests::client_queues`): `client_queues_child <backend> <mode>
//! <args...>`, exit status 0 on success.

tandem_tests::child_process_main!(
    "client_queues_child",
    tandem_tests::client_queues::child_main
);
