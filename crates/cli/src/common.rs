//! What every command shares: the global connection and output options, the error that carries an
//! exit code, and the small parsers of `KEY=VALUE` arguments and `-f FILE|-` inputs. It sits below
//! the command modules (they take [`GlobalArgs`], not the whole parsed command line), so none of
//! them reaches up into the crate root that parses and dispatches.

use anyhow::{Context, Result};
use clap::Args;
use cwsandbox_client::{Client, Config};

use crate::output::{Format, Output};

/// The heading under which `--help` lists the options every command takes.
pub const GLOBAL: &str = "Global options";

/// The options every command takes (`global`, so they may stand before or after the subcommand).
// No argument group (derived `Args` get one): nothing names these options together, and without
// one the parser is the one `Cli` had when they were its own fields.
#[derive(Args, Debug)]
#[group(skip)]
pub struct GlobalArgs {
    /// The API (data plane and gateway). Without it (and without CWSANDBOX_BASE_URL) the real
    /// service's URL is used.
    #[arg(long, global = true, env = "CWSANDBOX_BASE_URL", value_name = "URL", help_heading = GLOBAL)]
    pub base_url: Option<String>,
    /// The control plane (managed runners); defaults to the base URL.
    #[arg(long, global = true, env = "CWSANDBOX_CONTROL_PLANE_URL", value_name = "URL", help_heading = GLOBAL)]
    pub control_plane_url: Option<String>,
    /// The bearer token (the emulator prints one as CWSANDBOX_API_KEY).
    #[arg(long, global = true, env = "CWSANDBOX_API_KEY", hide_env_values = true, value_name = "TOKEN",
          help_heading = GLOBAL)]
    pub api_key: Option<String>,
    /// Output format. Default: a table for lists and results, YAML for documents (a policy, the
    /// values); `table` is refused for documents. JSON and YAML use the API's proto3 JSON names.
    #[arg(short, long, global = true, value_enum, help_heading = GLOBAL)]
    pub output: Option<Format>,
}

impl GlobalArgs {
    /// The base URL in use: the flag or the variable, else the real service's.
    pub fn base_url(&self) -> String {
        self.base_url.clone().filter(|u| !u.is_empty()).unwrap_or_else(|| cwsandbox_client::DEFAULT_BASE_URL.to_owned())
    }

    pub fn config(&self) -> Result<Config> {
        let api_key = self.api_key.clone().context("no API key: set CWSANDBOX_API_KEY or pass --api-key")?;
        let mut config = Config::new(self.base_url(), api_key);
        if let Some(url) = self.control_plane_url.clone().filter(|u| !u.is_empty()) {
            config = config.with_control_plane_url(url);
        }
        Ok(config)
    }

    pub fn client(&self) -> Result<Client> {
        Ok(Client::new(self.config()?)?)
    }

    pub fn output(&self) -> Output {
        Output(self.output)
    }
}

/// An error that carries its own exit code and has already been reported.
#[derive(Debug)]
pub struct Exit(pub u8);

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}", self.0)
    }
}

impl std::error::Error for Exit {}

pub fn parse_pair(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected KEY=VALUE, got {text:?}"))
}

/// A file's text, or stdin for `-`.
pub fn read_input(file: &str) -> Result<String> {
    if file == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).context("reading stdin")?;
        Ok(text)
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {file}"))
    }
}
