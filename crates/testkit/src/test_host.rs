//! Hosts of a test's own: a network namespace routed from this machine through a veth pair, at
//! `<network>.10` (this machine `<network>.1`, a /24), so that a test reaches "the world" from a
//! sandbox network without a packet leaving the machine. Root only; removed on drop.

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A test host; `name` is both its namespace's and its link's.
pub struct TestHost {
    name: String,
    address: Ipv4Addr,
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("ip runs");
    assert!(status.success(), "ip {}", args.join(" "));
}

impl TestHost {
    /// Makes the host `name` (at most 15 characters) at `<network>.10`. A host of that name left
    /// by an earlier run is removed first.
    pub fn start(name: &str, network: [u8; 3]) -> TestHost {
        let [a, b, c] = network;
        let host = TestHost { name: name.to_owned(), address: Ipv4Addr::new(a, b, c, 10) };
        host.remove();
        ip(&["netns", "add", name]);
        ip(&["link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", name]);
        ip(&["addr", "add", &format!("{a}.{b}.{c}.1/24"), "dev", name]);
        ip(&["link", "set", name, "up"]);
        ip(&["-n", name, "link", "set", "lo", "up"]);
        ip(&["-n", name, "link", "set", "eth0", "up"]);
        ip(&["-n", name, "addr", "add", &format!("{}/24", host.address), "dev", "eth0"]);
        ip(&["-n", name, "route", "add", "default", "via", &format!("{a}.{b}.{c}.1")]);
        // Replies to a sandbox come in here and are forwarded to the emulator's bridge.
        std::fs::write(format!("/proc/sys/net/ipv4/conf/{name}/forwarding"), "1").expect("forwarding on the link");
        host
    }

    /// Its address.
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }

    /// Its namespace's file.
    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    fn remove(&self) {
        for args in [["link", "del", &self.name], ["netns", "del", &self.name]] {
            let _ = Command::new("ip").args(args).stderr(Stdio::null()).status();
        }
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Runs `work` on a thread inside the network namespace at `path`.
pub fn in_namespace<T: Send + 'static>(path: &Path, work: impl FnOnce() -> T + Send + 'static) -> T {
    let namespace = std::fs::File::open(path).expect("namespace opens");
    std::thread::spawn(move || {
        // SAFETY: setns moves this thread only, into a namespace file we opened.
        assert_eq!(unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) }, 0, "setns");
        work()
    })
    .join()
    .expect("namespace thread")
}
