//! The emulator suites' helpers: the testkit's in-process emulators, clients and fake runtime.
#![allow(unused_imports)]

pub use cwsandbox_testkit::in_process::*;
