//! The fork gate under load: threads take and release guarded locks without
//! pause while the test forks again and again. Every child finds each lock
//! free (none was copied held) and knows it is not the process the locks'
//! owner was made in; the parent's threads run on throughout. Run in release
//! too (the host leg), where the threads interleave otherwise.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tandem_process::{lock_across_forks, MadeIn};

const THREADS: usize = 4;
const LOCKS: usize = 8;
const FORKS: usize = 200;

#[test]
fn forks_never_copy_a_guarded_lock_held() {
    let locks: Arc<Vec<Mutex<u64>>> = Arc::new((0..LOCKS).map(|_| Mutex::new(0)).collect());
    let made_in = MadeIn::this_process();
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (locks, stop) = (Arc::clone(&locks), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut taken = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for lock in locks.iter().skip(t % LOCKS) {
                        *lock_across_forks(lock) += 1;
                        taken += 1;
                    }
                }
                taken
            })
        })
        .collect();
    for round in 0..FORKS {
        // SAFETY: the child only tries locks (never blocks on one), reads an
        // atomic and calls _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let all_free = locks.iter().all(|lock| lock.try_lock().is_ok());
            let code = match (all_free, made_in.is_this_process()) {
                (true, false) => 0,
                (false, _) => 1,
                (true, true) => 2,
            };
            // SAFETY: ends the child without the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "fork {round}: child status {status:#x} (1: a lock was copied held; 2: the child \
             took itself for the parent)"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let taken: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(taken > 0);
    assert!(made_in.is_this_process());
    let total: u64 = locks.iter().map(|lock| *lock.lock().unwrap()).sum();
    assert_eq!(total, taken, "every guarded increment landed once");
}
