//! The page shell and the two assets it loads, compiled into the binary: nothing comes from a
//! CDN, so the dashboard works offline.

use axum::extract::Path;
use axum::response::{IntoResponse, Redirect, Response};
use http::StatusCode;
use maud::{DOCTYPE, html};

const SCRIPT: &str = include_str!("../assets/app.js");
const STYLE: &str = include_str!("../assets/app.css");

/// The views, in the navigation's order: (path under /ui/, label).
pub const VIEWS: &[(&str, &str)] = &[
    ("cluster", "Cluster"),
    ("readiness", "SUNK readiness"),
    ("slurm", "Slurm"),
    ("sandboxes", "Sandboxes"),
    ("runners", "Runners"),
    ("requests", "Requests"),
    ("clock", "Clock"),
    ("faults", "Faults"),
];

/// `/ui` → `/ui/`.
pub async fn redirect_to_root() -> Redirect {
    Redirect::permanent("/ui/")
}

/// The shell, the same for every page: the script reads the path and fills `<main>`.
pub async fn shell() -> Response {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "cwsandbox emulator" }
                // No favicon request: it would reach the API's port unauthenticated.
                link rel="icon" href="data:,";
                link rel="stylesheet" href="/ui/assets/app.css";
                script defer src="/ui/assets/app.js" {}
            }
            body {
                header.top {
                    a.brand href="/ui/" { "cwsandbox emulator" }
                    nav #nav hidden {
                        @for (path, label) in VIEWS {
                            a href={ "/ui/" (path) } data-view=(path) { (label) }
                        }
                    }
                    span.spacer {}
                    span #live title="live updates" {}
                    span #who {}
                    button #logout type="button" hidden { "Sign out" }
                }
                form #login hidden autocomplete="off" {
                    h1 { "Sign in" }
                    p { "Paste a bearer token of the emulator (the ready file's "
                        code { "tokens" } ", or " code { "CWSANDBOX_API_KEY" } ")." }
                    label { "Token " input name="token" type="password" required; }
                    button type="submit" { "Sign in" }
                    p #login-error role="alert" {}
                }
                main #view aria-live="polite" {}
            }
        }
    };
    (
        [
            (http::header::CACHE_CONTROL, "no-store"),
            // Only this page's own script runs, and no other site may frame it. Inline style
            // attributes draw the bars' widths.
            (
                http::header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
                 frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
            ),
            (http::header::REFERRER_POLICY, "no-referrer"),
            (http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        axum::response::Html(page.into_string()),
    )
        .into_response()
}

/// `/ui/assets/app.js` and `/ui/assets/app.css`.
pub async fn asset(Path(name): Path<String>) -> Response {
    let (body, content_type) = match name.as_str() {
        "app.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "app.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset\n").into_response(),
    };
    // Assets change only with the binary; a short cache keeps a reload cheap and a new build seen.
    ([(http::header::CONTENT_TYPE, content_type), (http::header::CACHE_CONTROL, "max-age=60")], body).into_response()
}
