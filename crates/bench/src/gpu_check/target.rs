//! One target of the GPU check as the report states it: the figure and the verdict, or why
//! there is none.

use serde::Serialize;

/// One target of the GPU check, judged from the files, or why it could not be.
#[derive(Serialize)]
pub(super) struct Target {
    pub(super) target: String,
    pub(super) measured: String,
    pub(super) met: Option<bool>,
}

pub(super) fn target(target: &str, judged: Option<(String, bool)>, why_not: &str) -> Target {
    match judged {
        Some((measured, met)) => Target { target: target.into(), measured, met: Some(met) },
        None => Target { target: target.into(), measured: format!("not measured: {why_not}"), met: None },
    }
}
