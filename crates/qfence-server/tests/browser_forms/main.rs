//! The plan editor and controller registration in a real browser (Debian's headless chromium
//! over WebDriver, with the console's browser harness). Each test clicks through a story and
//! leaves screenshots in `target/console-screenshots/`.

// Tests measure real elapsed time and wait on real processes: they may read the clocks.
#![allow(clippy::disallowed_methods)]
// The harness's Browser holds a WebDriver session, which has no Debug.
#![allow(missing_debug_implementations)]

#[path = "../browser/harness.rs"]
mod harness;
#[path = "../runtime/lab.rs"]
#[allow(dead_code)]
mod lab;

mod daemon;
mod editor;
mod register;

use anyhow::Result;
use thirtyfour::components::SelectElement;

use harness::{Browser, By, lab_console};

pub use harness::{ADMIN, OPERATOR, VIEWER, phase, tokens};

/// `[name='NAME']`.
pub fn named(name: &str) -> String {
    format!("[name='{name}']")
}

/// Picks `value` in the select named `name` (as a user does: the change event fires).
pub async fn pick(b: &Browser, name: &str, value: &str) -> Result<()> {
    let e = b.wait_for(&named(name)).await?;
    SelectElement::new(&e).await?.select_by_value(value).await?;
    Ok(())
}

/// The non-empty option values the select named `name` offers now.
pub async fn offered(b: &Browser, name: &str) -> Result<Vec<String>> {
    let e = b.wait_for(&named(name)).await?;
    let mut out = Vec::new();
    for o in e.find_all(By::Css("option")).await? {
        let v = o.value().await?.unwrap_or_default();
        if !v.is_empty() {
            out.push(v);
        }
    }
    Ok(out)
}

/// The current value of the field named `name`.
pub async fn value(b: &Browser, name: &str) -> Result<String> {
    Ok(b.wait_for(&named(name))
        .await?
        .value()
        .await?
        .unwrap_or_default())
}

/// The messages shown next to field `key`.
pub async fn errors_at(b: &Browser, key: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in b
        .driver
        .find_all(By::Css(format!(".field-error[data-for='{key}']")))
        .await?
    {
        out.push(e.text().await?);
    }
    Ok(out)
}
