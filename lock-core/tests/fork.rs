//! Owner tokens stay unique across `fork(2)`: a pre-fork server's workers
//! must not draw the tokens their parent (or each other) will draw.
//!
//! Its own binary without the test harness, so the process is single-threaded
//! when it forks.

#![allow(unsafe_code)] // fork(2) is the point of the test.

use std::fs::File;
use std::io::{Read, Write};

use lock_core::backend::OwnerToken;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork, pipe};

fn main() {
    // Draw once before forking, so a generator kept in the process (a
    // thread-local one, say) is seeded and would be copied into the child.
    let _warm = OwnerToken::random();
    let (read, write) = pipe().expect("pipe");
    // SAFETY: the process is single-threaded (no test harness, no runtime),
    // and the child only draws a token, writes it and exits.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            drop(read);
            let token = OwnerToken::random().to_hex();
            let written = File::from(write).write_all(token.as_bytes());
            std::process::exit(i32::from(written.is_err()));
        }
        ForkResult::Parent { child } => {
            drop(write);
            let mut childs = String::new();
            File::from(read)
                .read_to_string(&mut childs)
                .expect("read the child's token");
            assert_eq!(
                waitpid(child, None).expect("waitpid"),
                WaitStatus::Exited(child, 0)
            );
            let ours = OwnerToken::random().to_hex();
            assert_eq!(childs.len(), 32, "the child sent a whole token");
            assert_ne!(
                ours, childs,
                "parent and forked child drew the same owner token"
            );
            println!("test owner_tokens_differ_after_fork ... ok");
        }
    }
}
