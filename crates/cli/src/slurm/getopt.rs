//! `getopt_long` as the Slurm commands use it (glibc semantics): short options with bundling
//! (`-Xn`), attached or separate arguments (`-oJobID`, `-o JobID`), long options with `=` or a
//! separate argument, unambiguous long prefixes (`--form`), arguments permuted so options may
//! follow operands, `--` ending options, and glibc's messages for bad input.

/// Whether an option takes an argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    /// No argument.
    No,
    /// A required argument.
    Required,
    /// An optional argument (long form only with `=`; short form only attached).
    Optional,
}

/// One option: its key, the short letter (if any), the long names.
#[derive(Debug, Clone, Copy)]
pub struct Opt {
    /// What the caller matches on.
    pub key: &'static str,
    /// `-x`.
    pub short: Option<char>,
    /// `--name` forms.
    pub long: &'static [&'static str],
    /// Its argument.
    pub arg: Arg,
}

/// What the command line said, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// An option with its argument (if any).
    Opt(&'static str, Option<String>),
    /// An operand.
    Operand(String),
}

/// Parses `args` (without argv[0]). Errors are glibc's text, ready for stderr.
pub fn parse(prog: &str, args: &[String], spec: &[Opt]) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut index = 0;
    while index < args.len() {
        let arg = &args[index];
        index += 1;
        if arg == "--" {
            items.extend(args[index..].iter().cloned().map(Item::Operand));
            break;
        }
        if let Some(body) = arg.strip_prefix("--") {
            let (name, inline) = match body.split_once('=') {
                Some((name, value)) => (name, Some(value.to_owned())),
                None => (body, None),
            };
            let exact = spec.iter().find(|opt| opt.long.contains(&name));
            let opt = match exact {
                Some(opt) => opt,
                None => {
                    let mut matches: Vec<(&Opt, &str)> = Vec::new();
                    for opt in spec {
                        for long in opt.long {
                            if long.starts_with(name) && !matches.iter().any(|(seen, _)| seen.key == opt.key) {
                                matches.push((opt, long));
                            }
                        }
                    }
                    match matches.len() {
                        0 => return Err(format!("{prog}: unrecognized option '--{name}'")),
                        1 => matches[0].0,
                        _ => {
                            let names: Vec<String> = matches.iter().map(|(_, long)| format!("'--{long}'")).collect();
                            return Err(format!(
                                "{prog}: option '--{name}' is ambiguous; possibilities: {}",
                                names.join(" ")
                            ));
                        }
                    }
                }
            };
            let full = opt.long.iter().find(|long| long.starts_with(name)).copied().unwrap_or(name);
            match opt.arg {
                Arg::No => {
                    if inline.is_some() {
                        return Err(format!("{prog}: option '--{full}' doesn't allow an argument"));
                    }
                    items.push(Item::Opt(opt.key, None));
                }
                Arg::Optional => items.push(Item::Opt(opt.key, inline)),
                Arg::Required => {
                    let value = match inline {
                        Some(value) => value,
                        None if index < args.len() => {
                            index += 1;
                            args[index - 1].clone()
                        }
                        None => return Err(format!("{prog}: option '--{full}' requires an argument")),
                    };
                    items.push(Item::Opt(opt.key, Some(value)));
                }
            }
            continue;
        }
        if arg.len() > 1 && arg.starts_with('-') {
            let letters: Vec<char> = arg.chars().skip(1).collect();
            let mut position = 0;
            while position < letters.len() {
                let letter = letters[position];
                position += 1;
                let Some(opt) = spec.iter().find(|opt| opt.short == Some(letter)) else {
                    return Err(format!("{prog}: invalid option -- '{letter}'"));
                };
                match opt.arg {
                    Arg::No => items.push(Item::Opt(opt.key, None)),
                    Arg::Optional => {
                        let rest: String = letters[position..].iter().collect();
                        items.push(Item::Opt(opt.key, (!rest.is_empty()).then_some(rest)));
                        break;
                    }
                    Arg::Required => {
                        let rest: String = letters[position..].iter().collect();
                        let value = if !rest.is_empty() {
                            rest
                        } else if index < args.len() {
                            index += 1;
                            args[index - 1].clone()
                        } else {
                            return Err(format!("{prog}: option requires an argument -- '{letter}'"));
                        };
                        items.push(Item::Opt(opt.key, Some(value)));
                        break;
                    }
                }
            }
            continue;
        }
        items.push(Item::Operand(arg.clone()));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &[Opt] = &[
        Opt { key: "format", short: Some('o'), long: &["format", "fields"], arg: Arg::Required },
        Opt { key: "allocations", short: Some('X'), long: &["allocations"], arg: Arg::No },
        Opt { key: "noheader", short: Some('n'), long: &["noheader"], arg: Arg::No },
        Opt { key: "starttime", short: Some('S'), long: &["starttime"], arg: Arg::Required },
        Opt { key: "state", short: Some('s'), long: &["state"], arg: Arg::Required },
    ];

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn every_form_of_an_argument() {
        let parsed =
            parse("sacct", &args(&["-oJobID", "-o", "State", "--format=End", "--format", "Start", "--form=x"]), SPEC)
                .unwrap();
        let values: Vec<_> =
            parsed.iter().map(|item| if let Item::Opt(_, Some(v)) = item { v.as_str() } else { "" }).collect();
        assert_eq!(values, ["JobID", "State", "End", "Start", "x"]);
    }

    #[test]
    fn bundles_permutes_and_stops_at_double_dash() {
        let parsed = parse("sacct", &args(&["x", "-Xno", "JobID", "--", "-n"]), SPEC).unwrap();
        assert_eq!(
            parsed,
            vec![
                Item::Operand("x".into()),
                Item::Opt("allocations", None),
                Item::Opt("noheader", None),
                Item::Opt("format", Some("JobID".into())),
                Item::Operand("-n".into()),
            ]
        );
    }

    #[test]
    fn glibc_messages() {
        assert_eq!(parse("sacct", &args(&["-z"]), SPEC).unwrap_err(), "sacct: invalid option -- 'z'");
        assert_eq!(parse("sacct", &args(&["-o"]), SPEC).unwrap_err(), "sacct: option requires an argument -- 'o'");
        assert_eq!(parse("sacct", &args(&["--bogus"]), SPEC).unwrap_err(), "sacct: unrecognized option '--bogus'");
        assert_eq!(
            parse("sacct", &args(&["--format"]), SPEC).unwrap_err(),
            "sacct: option '--format' requires an argument"
        );
        assert_eq!(
            parse("sacct", &args(&["--noheader=1"]), SPEC).unwrap_err(),
            "sacct: option '--noheader' doesn't allow an argument"
        );
        assert_eq!(
            parse("sacct", &args(&["--st=1"]), SPEC).unwrap_err(),
            "sacct: option '--st' is ambiguous; possibilities: '--starttime' '--state'"
        );
    }
}
