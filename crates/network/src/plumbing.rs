//! The links, namespaces and the bridge, through iproute2's `ip`; the bridge's ownership.

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::types::{NetworkConfig, NetworkError};

/// Where `ip netns add` binds a namespace.
const NETNS_DIR: &str = "/run/netns";
/// The start of a bridge's alias: whose it is.
const OWNER_TAG: &str = "cwsandbox-emulator";

/// Runs `program args`, feeding `input`; its stdout, or its stderr as the error.
pub(crate) fn run(program: &Path, args: &[&str], input: Option<&str>) -> Result<String, NetworkError> {
    let describe = || format!("{} {}", program.display(), args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| NetworkError::Command { command: describe(), message: error.to_string() })?;
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        // A tool that exits early closes its end: its stderr says why.
        let _ = stdin.write_all(input.as_bytes());
    }
    let output = child
        .wait_with_output()
        .map_err(|error| NetworkError::Command { command: describe(), message: error.to_string() })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        let message = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        Err(NetworkError::Command { command: describe(), message: format!("{} ({})", message, output.status) })
    }
}

/// Root, `ip` and `nft`, or why not.
pub(crate) fn check_tools(config: &NetworkConfig) -> Result<(), NetworkError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(NetworkError::Unavailable(
            "the emulator is not root (namespaces, links and nftables rules need it)".to_owned(),
        ));
    }
    for (tool, package, version) in [(&config.ip, "iproute2", "-V"), (&config.nft, "nftables", "--version")] {
        run(tool, &[version], None).map_err(|error| {
            NetworkError::Unavailable(format!("`{}` does not run (Debian's {package}): {error}", tool.display()))
        })?;
    }
    Ok(())
}

/// The bridge's owner tag for this process: its pid and start time, so a reused pid is not
/// taken for a live owner.
fn owner_tag() -> String {
    let pid = std::process::id();
    format!("{OWNER_TAG} pid={pid} start={}", start_time(pid).unwrap_or_default())
}

/// A process's start time (`/proc/<pid>/stat` field 22), if it is alive.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the owner a bridge's alias names still runs: its pid, if so.
fn live_owner(alias: &str) -> Option<u32> {
    let mut pid = None;
    let mut start = None;
    for field in alias.split_whitespace() {
        if let Some(value) = field.strip_prefix("pid=") {
            pid = value.parse::<u32>().ok();
        } else if let Some(value) = field.strip_prefix("start=") {
            start = value.parse::<u64>().ok();
        }
    }
    let pid = pid?;
    (start.is_some() && start_time(pid) == start).then_some(pid)
}

fn sys_class_net(name: &str) -> PathBuf {
    Path::new("/sys/class/net").join(name)
}

/// Whether the bridge may be taken: absent, or an emulator's that is no longer running.
fn check_owner(config: &NetworkConfig) -> Result<(), NetworkError> {
    let bridge = &config.bridge;
    if !sys_class_net(bridge).exists() {
        return Ok(());
    }
    let alias = std::fs::read_to_string(sys_class_net(bridge).join("ifalias")).unwrap_or_default();
    if !alias.starts_with(OWNER_TAG) {
        return Err(NetworkError::InvalidConfig(format!(
            "interface {bridge} exists and is not an emulator's bridge: give `network.bridge` another name"
        )));
    }
    match live_owner(&alias) {
        Some(pid) => Err(NetworkError::InUse { bridge: bridge.clone(), pid }),
        None => Ok(()),
    }
}

/// Removes what an emulator that is no longer running left of the bridge (killed with
/// SIGKILL, its shutdown never ran): `true` if there was something. A running emulator's bridge,
/// or an interface of that name that is no emulator's, is left alone.
pub(crate) fn remove_leftovers(config: &NetworkConfig) -> bool {
    if !sys_class_net(&config.bridge).exists() || check_owner(config).is_err() {
        return false;
    }
    remove_everything(config);
    true
}

/// Takes the bridge: refuses it where a live emulator owns it or it is not an emulator's,
/// removes a dead emulator's leftovers, and makes it afresh.
pub(crate) fn claim_bridge(config: &NetworkConfig) -> Result<(), NetworkError> {
    let bridge = &config.bridge;
    let check_owner = || check_owner(config);
    check_owner()?;
    // A dead emulator's namespaces, links and tables go, as does anything half made.
    remove_everything(config);
    let pod_cidr = config.pod_cidr;
    let gateway = format!("{}/{}", pod_cidr.gateway(), pod_cidr.length);
    if let Err(error) = run(&config.ip, &["link", "add", bridge, "type", "bridge"], None) {
        // Another emulator may have made it since the check.
        check_owner()?;
        return Err(error);
    }
    let made = (|| {
        run(&config.ip, &["link", "set", bridge, "alias", &owner_tag()], None)?;
        run(&config.ip, &["addr", "add", &gateway, "dev", bridge], None)?;
        // Sandboxes reach each other and the world through the host's routing: forwarding on
        // the bridge only (the host's other interfaces keep their setting), and no redirects,
        // which would tell a sandbox to send to another directly (its port cannot).
        write_sysctl(&format!("net/ipv4/conf/{bridge}/forwarding"), "1")?;
        write_sysctl(&format!("net/ipv4/conf/{bridge}/send_redirects"), "0")?;
        // Sandboxes have no IPv6: the bridge needs none either (absent where IPv6 is off).
        let _ = write_sysctl(&format!("net/ipv6/conf/{bridge}/disable_ipv6"), "1");
        run(&config.ip, &["link", "set", bridge, "up"], None).map(|_| ())
    })();
    if made.is_err() {
        let _ = run(&config.ip, &["link", "del", bridge], None);
    }
    made
}

fn write_sysctl(key: &str, value: &str) -> Result<(), NetworkError> {
    let path = Path::new("/proc/sys").join(key);
    std::fs::write(&path, value).map_err(|error| NetworkError::Command {
        command: format!("write {value} to {}", path.display()),
        message: error.to_string(),
    })
}

/// A sandbox's namespace and link name.
pub(crate) fn link_name(config: &NetworkConfig, index: u64) -> String {
    format!("{}-{index}", config.bridge)
}

/// Where a sandbox's link goes.
pub(crate) enum Place {
    /// A namespace made for it.
    New,
    /// The network namespace of this process.
    OfProcess(u32),
}

/// Names the namespace `<bridge>-<index>` (a new one, or the process's) and puts `eth0` at
/// `address` in it, its host end an isolated port of the bridge; returns the name's path.
pub(crate) fn make_namespace(
    config: &NetworkConfig,
    index: u64,
    address: Ipv4Addr,
    place: Place,
) -> Result<PathBuf, NetworkError> {
    let name = link_name(config, index);
    let gateway = config.pod_cidr.gateway();
    match place {
        Place::New => run(&config.ip, &["netns", "add", &name], None)?,
        Place::OfProcess(pid) => run(&config.ip, &["netns", "attach", &name, &pid.to_string()], None)?,
    };
    let host_side = format!(
        "link add {name} type veth peer name eth0 netns {name}\n\
         link set {name} master {bridge}\n\
         link set dev {name} type bridge_slave isolated on\n\
         link set {name} up\n",
        bridge = config.bridge
    );
    run(&config.ip, &["-batch", "-"], Some(&host_side))?;
    let inside = format!(
        "link set lo up\n\
         link set eth0 up\n\
         addr add {address}/32 dev eth0\n\
         route add {gateway} dev eth0 scope link\n\
         route add default via {gateway} dev eth0\n"
    );
    run(&config.ip, &["-n", &name, "-batch", "-"], Some(&inside))?;
    Ok(Path::new(NETNS_DIR).join(name))
}

/// Removes a sandbox's link and namespace name (either may be gone already; a process's
/// namespace lives on with the process).
pub(crate) fn remove_namespace(config: &NetworkConfig, index: u64) {
    let name = link_name(config, index);
    if sys_class_net(&name).exists() {
        let _ = run(&config.ip, &["link", "del", &name], None);
    }
    if Path::new(NETNS_DIR).join(&name).exists()
        && let Err(error) = run(&config.ip, &["netns", "del", &name], None)
    {
        tracing::warn!(namespace = %name, %error, "cannot remove a sandbox's network namespace");
    }
}

/// Removes everything of the bridge: its sandboxes' links and namespaces, its tables, itself.
pub(crate) fn remove_everything(config: &NetworkConfig) {
    let prefix = format!("{}-", config.bridge);
    let ours =
        |name: &str| name.strip_prefix(&prefix).is_some_and(|rest| rest.bytes().all(|byte| byte.is_ascii_digit()));
    for entry in std::fs::read_dir("/sys/class/net").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if ours(&name) {
            let _ = run(&config.ip, &["link", "del", &name], None);
        }
    }
    for entry in std::fs::read_dir(NETNS_DIR).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if ours(&name)
            && let Err(error) = run(&config.ip, &["netns", "del", &name], None)
        {
            tracing::warn!(namespace = %name, %error, "cannot remove a sandbox's network namespace");
        }
    }
    for family in ["inet", "bridge"] {
        let _ = run(&config.nft, &["delete", "table", family, &config.table()], None);
    }
    if sys_class_net(&config.bridge).exists() {
        let _ = run(&config.ip, &["link", "del", &config.bridge], None);
    }
}
