//! The emulator's web dashboard, served under `/ui/` on the emulator's one port.
//!
//! - **The page** (`/ui/` and every path below it but `api/` and `assets/`) is one small shell:
//!   a login form, the navigation and an empty `<main>`. It carries no data, so it needs no token.
//! - **The views** (`/ui/api/view/<view>`) are HTML fragments rendered here with maud from the
//!   world, for the token in the `Authorization` header. The script keeps the token in the
//!   browser's session storage and sends it as a header, never in a URL.
//! - **Live**: `/ui/api/changes` is a server-sent event stream of the same change signal the kube
//!   facade's watches use (and of the request log's); on each event the script fetches the
//!   current view again and swaps it in, keeping what the user is typing or following.
//! - **Actions** (`/ui/api/…` POSTs: delete, exec, clock) run the API's own handlers.
//!
//! Who sees what is decided as the API decides it ([`viewer`]): each view is admitted by the
//! catalogue access of the RPC that reads the same thing, and reads the world in the caller's
//! scope through the same queries.

mod actions;
mod assets;
mod format;
mod live;
mod viewer;
mod views;

use axum::Router;
use axum::routing::{get, post};
use cwsandbox_surface::app::App;

/// The dashboard's routes, merged into the emulator's router.
pub fn routes(app: App) -> Router {
    Router::new()
        .route("/ui", get(assets::redirect_to_root))
        .route("/ui/", get(assets::shell))
        .route("/ui/assets/{name}", get(assets::asset))
        .route("/ui/api/whoami", get(viewer::whoami))
        .route("/ui/api/view/{*view}", get(views::view))
        .route("/ui/api/changes", get(live::changes))
        .route("/ui/api/logs/{sandbox}", get(live::logs))
        .route("/ui/api/sandboxes/{sandbox}/delete", post(actions::delete_sandbox))
        .route("/ui/api/sandboxes/{sandbox}/exec", post(actions::exec))
        .route("/ui/api/clock/{action}", post(actions::clock))
        .route("/ui/api/{*rest}", get(viewer::no_such_api).post(viewer::no_such_api))
        .route("/ui/{*page}", get(assets::shell))
        .with_state(app)
}
