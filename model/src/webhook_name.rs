//! A webhook's display name (issue 48): what a person calls it, shown beside its id wherever
//! a webhook is listed, so two webhooks with the same rules can be told apart without reading
//! 32 hex characters. Display only: the id stays the webhook's identity, names need not be
//! unique, and no call finds a webhook by name.

use std::fmt;

/// The longest name, in characters: long enough for `acme/payments-service (prod)`, short
/// enough for a table cell.
pub const MAX_CHARS: usize = 80;

/// A checked display name: 1–80 characters once trimmed, no control characters.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WebhookName(String);

/// Why a name was refused, in words a caller can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadName(pub &'static str);

impl fmt::Display for BadName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for BadName {}

impl WebhookName {
    /// Reads a name as a caller typed it. Blank means "no name": `Ok(None)`, which clears it.
    pub fn parse(text: &str) -> Result<Option<WebhookName>, BadName> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Ok(None);
        }
        if trimmed.chars().any(char::is_control) {
            return Err(BadName(
                "a name has no control characters (no newlines or tabs)",
            ));
        }
        if trimmed.chars().count() > MAX_CHARS {
            return Err(BadName("a name is at most 80 characters"));
        }
        Ok(Some(WebhookName(trimmed.to_string())))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WebhookName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_trimmed_and_blank_is_none() {
        assert_eq!(
            WebhookName::parse("  payments (prod) ")
                .unwrap()
                .map(|n| n.to_string()),
            Some("payments (prod)".to_string())
        );
        assert_eq!(WebhookName::parse("   ").unwrap(), None);
        assert_eq!(WebhookName::parse("").unwrap(), None);
    }

    #[test]
    fn control_characters_and_long_names_are_refused() {
        assert!(WebhookName::parse("a\nb").is_err());
        assert!(WebhookName::parse("a\u{7}b").is_err());
        let eighty = "é".repeat(MAX_CHARS);
        assert!(WebhookName::parse(&eighty).unwrap().is_some());
        assert!(WebhookName::parse(&format!("{eighty}x")).is_err());
    }
}
