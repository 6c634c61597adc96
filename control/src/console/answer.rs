//! The console's answers as HTTP responses: a page, a message page, and control's own fault
//! (logged, never shown). Shared by sign-in (`person`), the pages and the routes.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::Markup;
use switchboard_console::Chrome;

pub(crate) fn html(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

pub(crate) fn message(
    status: StatusCode,
    chrome: Option<&Chrome>,
    title: &str,
    text: &str,
) -> Response {
    html(
        status,
        switchboard_console::message_page(title, chrome, text),
    )
}

/// Control's fault: logged, never shown.
pub(crate) fn internal(e: &crate::Error) -> Response {
    tracing::error!(error = %e.log_text(), "console failed inside control");
    message(
        StatusCode::INTERNAL_SERVER_ERROR,
        None,
        "Something went wrong",
        "Switchboard could not answer this page. Try again in a moment.",
    )
}
