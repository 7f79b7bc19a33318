//! `sinfo` (Slurm 25.05): partitions and nodes of the emulator, grouped per partition and node
//! state like sinfo's default view (`%9P %.5a %.10l %.6D %.6t %N`), the node-oriented `-N`
//! view, `-R`'s drain reasons with who set them and when, the default partition's `*`, and
//! `drain`/`drng` for drained nodes.

use cwsandbox_client::emulator_v1 as pb;

use super::fmt;
use super::getopt::{self, Arg, Item, Opt};
use super::{Command, Conn, Env, Output};

/// The default format.
pub const DEFAULT_FORMAT: &str = "%9P %.5a %.10l %.6D %.6t %N";
/// `-s` (one space before NODELIST, as real Slurm prints it).
pub const SUMMARIZE_FORMAT: &str = "%9P %.5a %.10l %.16F %N";
/// `-l`.
/// 25.05 added the RESERVATION column (22.05 has none).
pub const LONG_FORMAT: &str = "%9P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %.11i %N";
/// `-N` (the node name column is as wide as the longest name).
pub const NODE_FORMAT: &str = "%N %.6D %.9P %6t";
/// `-N -l`. Slurm 22.05 and 25.05 print this view's CPUS column left-justified.
pub const NODE_LONG_FORMAT: &str = "%N %.6D %.9P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E";
/// `-R`: why nodes are drained, by whom and since when (25.05's `reason:20 ,user:9
/// ,timestamp:19 ,nodelist:0`).
pub const REASONS_FORMAT: &str = "%20E %9u %19H %N";
/// `-R -l`: the user as `name(uid)`, and the state.
pub const REASONS_LONG_FORMAT: &str = "%20E %12U %19H %6t %N";

const SPEC: &[Opt] = &[
    Opt { key: "all", short: Some('a'), long: &["all"], arg: Arg::No },
    Opt { key: "noheader", short: Some('h'), long: &["noheader"], arg: Arg::No },
    Opt { key: "help", short: None, long: &["help"], arg: Arg::No },
    Opt { key: "usage", short: None, long: &["usage"], arg: Arg::No },
    Opt { key: "long", short: Some('l'), long: &["long"], arg: Arg::No },
    Opt { key: "Node", short: Some('N'), long: &["Node"], arg: Arg::No },
    Opt { key: "nodes", short: Some('n'), long: &["nodes"], arg: Arg::Required },
    Opt { key: "format", short: Some('o'), long: &["format"], arg: Arg::Required },
    Opt { key: "partition", short: Some('p'), long: &["partition"], arg: Arg::Required },
    Opt { key: "list-reasons", short: Some('R'), long: &["list-reasons"], arg: Arg::No },
    Opt { key: "summarize", short: Some('s'), long: &["summarize"], arg: Arg::No },
    Opt { key: "states", short: Some('t'), long: &["states"], arg: Arg::Required },
    Opt { key: "verbose", short: Some('v'), long: &["verbose"], arg: Arg::No },
    Opt { key: "version", short: Some('V'), long: &["version"], arg: Arg::No },
    Opt { key: "json", short: None, long: &["json"], arg: Arg::Optional },
    Opt { key: "yaml", short: None, long: &["yaml"], arg: Arg::Optional },
];

#[derive(Debug, Clone)]
struct Field {
    letter: char,
    width: usize,
    right: bool,
    suffix: String,
    /// `%#X` or a `-N` node column: as wide as the widest value.
    auto: bool,
    /// For a letter sinfo does not know: the token as written, `%` included, printed in place of
    /// the field.
    invalid: Option<String>,
}

/// A parsed `sinfo` command line.
#[derive(Debug, Clone)]
pub struct Options {
    prefix: String,
    fields: Vec<Field>,
    header: bool,
    long: bool,
    node_view: bool,
    summarize: bool,
    reasons: bool,
    partitions: Vec<String>,
    nodes: Option<Vec<String>>,
    states: Vec<String>,
    info: Option<String>,
    /// Errors about the format, printed before the listing.
    warnings: Vec<String>,
    /// `--json`: the whole command line, for the document's `meta.command`.
    json: Option<Vec<String>>,
}

fn usage_error(message: String) -> Output {
    Output::fail(format!("{message}\nTry \"sinfo --help\" for more information"), 1)
}

/// The field letters sinfo knows.
const LETTERS: &str = "acCdDeEfFghHilmNPrstTuUwzG";

fn parse_format(format: &str, node_view: bool, warnings: &mut Vec<String>) -> (String, Vec<Field>) {
    let (prefix, tokens) = super::fmt::format_tokens(format, true);
    let fields = tokens
        .into_iter()
        .map(|token| {
            let invalid = (!LETTERS.contains(token.letter)).then(|| {
                warnings.push(format!("Invalid node format specification: {}", token.letter));
                format!("%{}", token.raw)
            });
            Field {
                auto: token.auto || (node_view && token.letter == 'N' && token.width == 0),
                letter: token.letter,
                width: token.width,
                right: token.right,
                suffix: token.suffix,
                invalid,
            }
        })
        .collect();
    (prefix, fields)
}

/// Parses a `sinfo` command line; `env` gives `SINFO_FORMAT`.
pub fn parse(args: &[String], env: &Env) -> Result<Options, Output> {
    let items = getopt::parse("sinfo", args, SPEC).map_err(usage_error)?;
    let mut options = Options {
        prefix: String::new(),
        fields: Vec::new(),
        header: true,
        long: false,
        node_view: false,
        summarize: false,
        reasons: false,
        partitions: Vec::new(),
        nodes: None,
        states: Vec::new(),
        info: None,
        warnings: Vec::new(),
        json: None,
    };
    let mut format = None;
    for item in items {
        match item {
            Item::Operand(operand) => return Err(usage_error(format!("sinfo: error: Unrecognized option: {operand}"))),
            Item::Opt(key, value) => {
                let value = value.unwrap_or_default();
                match key {
                    "noheader" => options.header = false,
                    "help" | "usage" => {
                        options.info =
                            Some("Usage: sinfo [-ahlNRsv] [-n nodes] [-o format] [-p partition] [-t states]\n".into())
                    }
                    "version" => options.info = Some("slurm 25.05.3\n".to_owned()),
                    "yaml" => {
                        return Err(Output::fail(
                            "sinfo: error: --yaml is not emulated (--json is, with the same data)",
                            1,
                        ));
                    }
                    "json" => {
                        super::json::check_spec("sinfo", &value).map_err(|message| Output::fail(message, 1))?;
                        options.json = Some(std::iter::once("sinfo".to_owned()).chain(args.iter().cloned()).collect());
                    }
                    "long" => options.long = true,
                    "Node" => options.node_view = true,
                    "nodes" => options.nodes = Some(fmt::expand_hostlist(&value)),
                    "format" => format = Some(value),
                    "partition" => {
                        options.partitions.extend(value.split(',').filter(|s| !s.is_empty()).map(str::to_owned))
                    }
                    "summarize" => options.summarize = true,
                    "list-reasons" => options.reasons = true,
                    "states" => {
                        for state in value.split(',').filter(|s| !s.is_empty()) {
                            let lower = state.to_ascii_lowercase();
                            let known = [
                                "idle",
                                "mix",
                                "mixed",
                                "alloc",
                                "allocated",
                                "drain",
                                "drained",
                                "draining",
                                "drng",
                                "all",
                            ];
                            if !known.contains(&lower.as_str()) {
                                return Err(usage_error(format!("sinfo: error: Bad state string {state}")));
                            }
                            options.states.push(lower);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    // As sinfo's opts.c orders them: -s, -N and -R choose their format before SINFO_FORMAT.
    let format = format
        .or_else(|| match (options.summarize, options.node_view, options.reasons, options.long) {
            (true, _, _, _) => Some(SUMMARIZE_FORMAT.to_owned()),
            (false, true, _, true) => Some(NODE_LONG_FORMAT.to_owned()),
            (false, true, _, false) => Some(NODE_FORMAT.to_owned()),
            (false, false, true, true) => Some(REASONS_LONG_FORMAT.to_owned()),
            (false, false, true, false) => Some(REASONS_FORMAT.to_owned()),
            _ => None,
        })
        .or_else(|| env.get("SINFO_FORMAT").cloned())
        .unwrap_or_else(|| if options.long { LONG_FORMAT } else { DEFAULT_FORMAT }.to_owned());
    // -R lists the nodes that are down, failed or drained unless -t says otherwise.
    if options.reasons && options.states.is_empty() {
        options.states.push("drain".to_owned());
    }
    let (prefix, fields) = parse_format(&format, options.node_view, &mut options.warnings);
    options.prefix = prefix;
    options.fields = fields;
    Ok(options)
}

fn header_of(letter: char) -> &'static str {
    match letter {
        'a' => "AVAIL",
        'c' => "CPUS",
        'C' => "CPUS(A/I/O/T)",
        'd' => "TMP_DISK",
        'D' => "NODES",
        'e' => "FREE_MEM",
        'E' => "REASON",
        'f' => "AVAIL_FEATURES",
        'F' => "NODES(A/I/O/T)",
        'g' => "GROUPS",
        'h' => "OVERSUBSCRIBE",
        'l' => "TIMELIMIT",
        'm' => "MEMORY",
        'N' => "NODELIST",
        'P' => "PARTITION",
        'r' => "ROOT",
        's' => "JOB_SIZE",
        't' => "STATE",
        'T' => "STATE",
        'w' => "WEIGHT",
        'z' => "S:C:T",
        'G' => "GRES",
        'H' => "TIMESTAMP",
        'i' => "RESERVATION",
        'u' | 'U' => "USER",
        _ => "",
    }
}

fn state_compact(state: i32) -> &'static str {
    match pb::SlurmNodeState::try_from(state) {
        Ok(pb::SlurmNodeState::Idle) => "idle",
        Ok(pb::SlurmNodeState::Mixed) => "mix",
        Ok(pb::SlurmNodeState::Allocated) => "alloc",
        Ok(pb::SlurmNodeState::Drained) => "drain",
        Ok(pb::SlurmNodeState::Draining) => "drng",
        _ => "unk",
    }
}

fn state_long(state: i32) -> &'static str {
    match pb::SlurmNodeState::try_from(state) {
        Ok(pb::SlurmNodeState::Idle) => "idle",
        Ok(pb::SlurmNodeState::Mixed) => "mixed",
        Ok(pb::SlurmNodeState::Allocated) => "allocated",
        Ok(pb::SlurmNodeState::Drained) => "drained",
        Ok(pb::SlurmNodeState::Draining) => "draining",
        _ => "unknown",
    }
}

/// sinfo's `-t` sort: state value, drained (a flag above the base states) first.
fn state_rank(state: i32) -> i32 {
    match pb::SlurmNodeState::try_from(state) {
        Ok(pb::SlurmNodeState::Draining) => 0,
        Ok(pb::SlurmNodeState::Drained) => 1,
        Ok(pb::SlurmNodeState::Mixed) => 2,
        Ok(pb::SlurmNodeState::Allocated) => 3,
        Ok(pb::SlurmNodeState::Idle) => 4,
        _ => 5,
    }
}

fn state_selected(states: &[String], state: i32) -> bool {
    states.is_empty()
        || states.iter().any(|wanted| {
            wanted == "all"
                || wanted == state_compact(state)
                || wanted == state_long(state)
                || (wanted == "drain" && state_compact(state) == "drng")
        })
}

/// One output line: a partition and the nodes of one state in it.
/// Fields whose value is one node's, so nodes that differ in one print on lines of their own.
const PER_NODE_FIELDS: &str = "cemzEGfdwuUH";

struct Group<'a> {
    partition: &'a pb::Partition,
    state: i32,
    nodes: Vec<&'a pb::SlurmNode>,
}

fn time_limit(partition: &pb::Partition) -> String {
    match partition.max_time_seconds {
        None => "infinite".to_owned(),
        Some(seconds) => {
            let minutes = fmt::limit_minutes(seconds);
            let (days, hours, mins) = (minutes / 1440, (minutes / 60) % 24, minutes % 60);
            if days > 0 { format!("{days}-{hours:02}:{mins:02}:00") } else { format!("{hours}:{mins:02}:00") }
        }
    }
}

fn value_of(letter: char, group: &Group<'_>, time_format: &fmt::TimeFormat, now: i64) -> String {
    if group.nodes.is_empty() {
        return empty_value_of(letter, group);
    }
    let names: Vec<String> = group.nodes.iter().map(|node| node.name.clone()).collect();
    let first = group.nodes.first();
    match letter {
        'c' => first.map(|n| n.cpus.to_string()).unwrap_or_default(),
        'C' => {
            let alloc: u32 = group.nodes.iter().map(|n| n.alloc_cpus).sum();
            let total: u32 = group.nodes.iter().map(|n| n.cpus).sum();
            format!("{alloc}/{}/0/{total}", total - alloc.min(total))
        }
        'd' => "0".to_owned(),
        'D' => group.nodes.len().to_string(),
        'E' => first
            .map(|n| if n.drain_reason.is_empty() { "none".to_owned() } else { n.drain_reason.clone() })
            .unwrap_or_default(),
        'f' => "(null)".to_owned(),
        'F' => {
            let alloc = group.nodes.iter().filter(|n| !n.job_ids.is_empty()).count();
            let total = group.nodes.len();
            format!("{alloc}/{}/0/{total}", total - alloc)
        }
        'G' => first.map(|n| fmt::node_gres(n).unwrap_or_else(|| "(null)".to_owned())).unwrap_or_default(),
        'm' => first.map(|n| n.real_memory_mb.to_string()).unwrap_or_default(),
        // FreeMem (a node-matching field, so one value per line): what `show node` reports.
        'e' => first.map(|n| n.real_memory_mb.saturating_sub(n.alloc_memory_mb).to_string()).unwrap_or_default(),
        'N' => fmt::hostlist(&names),
        't' => state_compact(group.state).to_owned(),
        'T' => state_long(group.state).to_owned(),
        'w' => "1".to_owned(),
        'z' => first.map(|n| format!("1:{}:1", n.cpus)).unwrap_or_default(),
        // The emulator has no reservations.
        'i' => String::new(),
        'u' => first
            .map(|n| if n.drain_user.is_empty() { "Unknown".to_owned() } else { n.drain_user.clone() })
            .unwrap_or_default(),
        'U' => first
            .map(|n| match n.drain_uid {
                Some(uid) if n.drain_user == uid.to_string() => format!("Unk({uid})"),
                Some(uid) => format!("{}({uid})", n.drain_user),
                None => "Unknown".to_owned(),
            })
            .unwrap_or_default(),
        'H' => first
            .map(|n| match fmt::secs(n.drain_time.as_ref()) {
                Some(at) => fmt::time_str(Some(at), time_format, now, 256),
                None => "Unknown".to_owned(),
            })
            .unwrap_or_default(),
        _ => value_of_partition(letter, group.partition),
    }
}

/// The fields that are the partition's, whatever its nodes.
fn value_of_partition(letter: char, partition: &pb::Partition) -> String {
    match letter {
        'a' => "up".to_owned(),
        // AllowGroups: every partition here admits every group.
        'g' => "all".to_owned(),
        'h' => {
            if partition.over_subscribe.is_empty() {
                "NO".to_owned()
            } else {
                partition.over_subscribe.clone()
            }
        }
        'l' => time_limit(partition),
        'P' => format!("{}{}", partition.name, if partition.default { "*" } else { "" }),
        'r' => "no".to_owned(),
        's' => "1-infinite".to_owned(),
        _ => String::new(),
    }
}

/// A partition's entry without nodes (`_create_sinfo` with no node: its counters zero, its
/// strings NULL, which glibc's printf shows as `(null)`): what print.c's functions make of it.
/// The partition's own fields read as for any entry.
fn empty_value_of(letter: char, group: &Group<'_>) -> String {
    match letter {
        'c' | 'd' | 'D' | 'm' | 'w' => "0".to_owned(),
        'C' | 'F' => "0/0/0/0".to_owned(),
        'z' => "0:0:0".to_owned(),
        'E' => "none".to_owned(),
        'f' | 'G' => "(null)".to_owned(),
        't' | 'T' => "n/a".to_owned(),
        'N' | 'i' => String::new(),
        // `reason_uid` is 0 (root), not NO_VAL; `reason_time` 0 prints Unknown.
        'u' => "root".to_owned(),
        'U' => "root(0)".to_owned(),
        'H' => "Unknown".to_owned(),
        _ => value_of_partition(letter, group.partition),
    }
}

fn print_str(out: &mut String, text: &str, width: usize, right: bool) {
    if width == 0 {
        out.push_str(text);
        return;
    }
    let shown: String = if right { format!("{text:>width$}") } else { text.to_owned() };
    let cut: String = shown.chars().take(width).collect();
    out.push_str(&format!("{cut:<width$}"));
}

/// Renders `sinfo` from the partitions and nodes; `now` is the emulator's time (for `-l` and
/// `-R`'s TIMESTAMP, in `SLURM_TIME_FORMAT`). Pure.
/// The listing, or with `--json` the document (`json` carries its `meta`). Pure.
pub fn render(
    options: &Options,
    partitions: &[pb::Partition],
    nodes: &[pb::SlurmNode],
    now: i64,
    env: &Env,
    json: Option<&super::json::Meta<'_>>,
) -> Output {
    if let Some(info) = &options.info {
        return Output::ok(info.clone());
    }
    let (time_format, _) = fmt::TimeFormat::from_env(env.get("SLURM_TIME_FORMAT").map(String::as_str));
    // Without a partition field (as in -R), sinfo does not split by partition: each node counts
    // once, under the first partition listing it.
    let by_partition = options.node_view || options.fields.iter().any(|field| field.letter == 'P');
    let mut seen: Vec<&str> = Vec::new();
    let mut groups: Vec<Group<'_>> = Vec::new();
    for partition in partitions {
        if !options.partitions.is_empty() && !options.partitions.contains(&partition.name) {
            continue;
        }
        let members: Vec<&pb::SlurmNode> = partition
            .nodes
            .iter()
            .filter_map(|name| nodes.iter().find(|node| &node.name == name))
            .filter(|node| options.nodes.as_ref().is_none_or(|wanted| wanted.contains(&node.name)))
            .filter(|node| state_selected(&options.states, node.state))
            .filter(|node| by_partition || !seen.contains(&node.name.as_str()))
            .collect();
        seen.extend(members.iter().map(|node| node.name.as_str()));
        if options.node_view {
            for node in members {
                groups.push(Group { partition, state: node.state, nodes: vec![node] });
            }
            continue;
        }
        // `_build_sinfo_data`: "by default every partition is shown, even if no nodes" (an
        // entry per partition when the format has a partition field and the view is not -N).
        // Its first node fills it; without one it prints NODES 0, STATE n/a.
        if by_partition && members.is_empty() {
            groups.push(Group { partition, state: 0, nodes: Vec::new() });
            continue;
        }
        if options.summarize {
            groups.push(Group { partition, state: 0, nodes: members });
            continue;
        }
        // As Slurm's `_build_sinfo_data`: nodes share a line when every per-node field the
        // format prints reads the same (no state field, no split by state).
        let split_by_state = options.fields.iter().any(|field| matches!(field.letter, 't' | 'T'));
        let per_node: Vec<char> = options
            .fields
            .iter()
            .map(|field| field.letter)
            .filter(|letter| PER_NODE_FIELDS.contains(*letter))
            .collect();
        let key_of = |node: &pb::SlurmNode| -> (i32, Vec<String>) {
            let alone = Group { partition, state: node.state, nodes: vec![node] };
            let state = if split_by_state { node.state } else { 0 };
            (state, per_node.iter().map(|letter| value_of(*letter, &alone, &time_format, now)).collect())
        };
        let mut lines: Vec<((i32, Vec<String>), Group<'_>)> = Vec::new();
        for node in members {
            let key = key_of(node);
            match lines.iter_mut().find(|(each, _)| *each == key) {
                Some((_, group)) => group.nodes.push(node),
                None => lines.push((key, Group { partition, state: node.state, nodes: vec![node] })),
            }
        }
        lines.sort_by_key(|(_, group)| if split_by_state { state_rank(group.state) } else { 0 });
        groups.extend(lines.into_iter().map(|(_, group)| group));
    }
    if !by_partition {
        // Merge what the partitions produced: lines with the same per-node values join.
        let mut merged: Vec<Group<'_>> = Vec::new();
        for group in groups {
            let key = |group: &Group<'_>| -> Vec<String> {
                let split_by_state = options.fields.iter().any(|field| matches!(field.letter, 't' | 'T'));
                let mut key: Vec<String> = options
                    .fields
                    .iter()
                    .filter(|field| PER_NODE_FIELDS.contains(field.letter))
                    .map(|field| value_of(field.letter, group, &time_format, now))
                    .collect();
                if split_by_state {
                    key.push(group.state.to_string());
                }
                key
            };
            match merged.iter_mut().find(|other| key(other) == key(&group)) {
                Some(other) => other.nodes.extend(group.nodes),
                None => merged.push(group),
            }
        }
        groups = merged;
    }
    if options.node_view {
        // `-N` lists nodes by name, each with every partition it is in.
        groups.sort_by(|a, b| {
            let (x, y) = (&a.nodes[0].name, &b.nodes[0].name);
            fmt::hostlist(std::slice::from_ref(x)).cmp(&fmt::hostlist(std::slice::from_ref(y)))
        });
    }
    if let Some(about) = json {
        // The lines sinfo would print, each as a record; the format's layout is not used.
        let entries =
            groups.iter().map(|group| super::json::sinfo_entry(group.partition, &group.nodes, nodes)).collect();
        return Output::ok(super::json::sinfo_document(entries, about).pretty());
    }
    let widths: Vec<usize> = options
        .fields
        .iter()
        .map(|field| {
            if !field.auto {
                return field.width;
            }
            let values = groups.iter().map(|group| value_of(field.letter, group, &time_format, now).len());
            values.chain(std::iter::once(header_of(field.letter).len())).max().unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    if options.long {
        out.push_str(&fmt::long_listing_date(now));
        out.push('\n');
    }
    let line = |out: &mut String, value: &dyn Fn(char) -> String| {
        out.push_str(&options.prefix);
        for (field, width) in options.fields.iter().zip(&widths) {
            if let Some(token) = &field.invalid {
                out.push_str(token);
                continue;
            }
            print_str(out, &value(field.letter), *width, field.right);
            out.push_str(&field.suffix);
        }
        out.push('\n');
    };
    if options.header {
        line(&mut out, &|letter| header_of(letter).to_owned());
    }
    for group in &groups {
        line(&mut out, &|letter| value_of(letter, group, &time_format, now));
    }
    let mut output = Output::ok(out);
    output.stderr = options.warnings.iter().map(|warning| format!("{warning}\n")).collect();
    output
}

/// `sinfo` against the emulator's partitions and nodes.
pub struct Sinfo;

/// What `sinfo` renders: partitions, nodes and the emulator's time (for `--json`, also the
/// caller and the cluster's name).
pub struct Answer {
    partitions: Vec<pb::Partition>,
    nodes: Vec<pb::SlurmNode>,
    now: i64,
    caller: Option<super::Caller>,
    cluster: String,
}

impl Command for Sinfo {
    const NAME: &'static str = "sinfo";
    type Options = Options;
    type Answer = Answer;

    fn parse(args: &[String], env: &Env) -> Result<Options, Output> {
        parse(args, env)
    }

    fn info(options: &Options) -> Option<&str> {
        options.info.as_deref()
    }

    async fn call(options: &Options, env: &Env, conn: &Conn) -> Result<Answer, Output> {
        let api_error = |error| super::api_error(Self::NAME, &error);
        let admin = conn.admin();
        let partitions = admin.list_partitions().await.map_err(api_error)?;
        let nodes = admin.list_slurm_nodes(&pb::ListSlurmNodesRequest::default()).await.map_err(api_error)?;
        let clock = admin.clock().await.map_err(api_error)?;
        let (caller, cluster) = if options.json.is_some() {
            let caller = super::caller(Self::NAME, env, conn).await?.0;
            (Some(caller), admin.slurm_config().await.map_err(api_error)?.cluster_name)
        } else {
            (None, String::new())
        };
        Ok(Answer { partitions, nodes, now: clock.now.map(|now| now.seconds).unwrap_or_default(), caller, cluster })
    }

    fn render(options: &Options, answer: Answer, env: &Env) -> Output {
        let (user, group) = match &answer.caller {
            Some(caller) if caller.uid != 0 => (caller.name.as_str(), ""),
            _ => ("root", "root"),
        };
        let about =
            options.json.as_deref().map(|command| super::json::Meta { command, user, group, cluster: &answer.cluster });
        render(options, &answer.partitions, &answer.nodes, answer.now, env, about.as_ref())
    }
}
