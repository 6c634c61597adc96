//! A webhook's source type as control's enum and back: one mapping for control, which
//! reads a caller's and answers its own, and the surfaces, which name it.

use switchboard_model::SourceType;

use crate::control::v1 as pb;

impl From<SourceType> for pb::SourceType {
    fn from(t: SourceType) -> Self {
        match t {
            SourceType::Forgejo => pb::SourceType::Forgejo,
            SourceType::Gitea => pb::SourceType::Gitea,
            SourceType::Github => pb::SourceType::Github,
            SourceType::Cairn => pb::SourceType::Cairn,
            SourceType::Generic => pb::SourceType::Generic,
        }
    }
}

/// The source type a message's enum value names: `None` for unspecified and for a value
/// this release does not know.
pub fn source_type(value: i32) -> Option<SourceType> {
    match pb::SourceType::try_from(value).ok()? {
        pb::SourceType::Forgejo => Some(SourceType::Forgejo),
        pb::SourceType::Gitea => Some(SourceType::Gitea),
        pb::SourceType::Github => Some(SourceType::Github),
        pb::SourceType::Cairn => Some(SourceType::Cairn),
        pb::SourceType::Generic => Some(SourceType::Generic),
        pb::SourceType::Unspecified => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_type_goes_there_and_back() {
        for t in SourceType::ALL {
            assert_eq!(source_type(pb::SourceType::from(t) as i32), Some(t));
        }
        assert_eq!(source_type(pb::SourceType::Unspecified as i32), None);
        assert_eq!(source_type(99), None);
    }
}
