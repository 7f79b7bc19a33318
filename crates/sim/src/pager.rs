//! One pager for every listing (sandboxes, managed runners, available runners): page sizes, and
//! opaque page tokens that carry the listing's name, its filters and the key of the last item
//! returned. Paging by key, not by position, keeps a page stable when items before it go away;
//! a token of another listing, or of the same listing with other filters, is refused by name.

use crate::error::{SimError, SimResult};

/// Version tag inside page tokens, so a future format change rejects old tokens cleanly.
const TOKEN_VERSION: &str = "page.v1";

/// One listing with its filters, as a token remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pager {
    listing: &'static str,
    filters: Vec<String>,
    size: usize,
}

impl Pager {
    /// A pager for `listing` with these filters; `page_size` 0 means `default`, larger than `max`
    /// means `max`, negative is INVALID_ARGUMENT on `page_size`.
    pub fn new(
        listing: &'static str,
        filters: impl IntoIterator<Item = String>,
        page_size: i32,
        default: usize,
        max: usize,
    ) -> SimResult<Pager> {
        let size = match usize::try_from(page_size) {
            Err(_) => return Err(SimError::invalid_field("page_size", "must not be negative")),
            Ok(0) => default,
            Ok(size) => size.min(max),
        };
        Ok(Pager { listing, filters: filters.into_iter().collect(), size })
    }

    /// How many items a page holds.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The key of the last item of the previous page, or `None` for the first page.
    pub fn after(&self, token: &str) -> SimResult<Option<Vec<String>>> {
        if token.is_empty() {
            return Ok(None);
        }
        let invalid = || SimError::invalid_field("page_token", "not a page token of this listing");
        let bytes = base64url_decode(token).ok_or_else(invalid)?;
        let (version, listing, filters, key): (String, String, Vec<String>, Vec<String>) =
            serde_json::from_slice(&bytes).map_err(|_| invalid())?;
        if version != TOKEN_VERSION || listing != self.listing {
            return Err(invalid());
        }
        if filters != self.filters {
            return Err(SimError::invalid_field(
                "page_token",
                "the page token belongs to a listing with other filters",
            ));
        }
        Ok(Some(key))
    }

    /// The token of the page after the one that ended with the item of `key`.
    pub fn token_after(&self, key: &[&str]) -> String {
        // Serializing strings cannot fail; an empty token would only end the listing.
        let json = serde_json::to_vec(&(TOKEN_VERSION, self.listing, &self.filters, key)).unwrap_or_default();
        base64url_encode(&json)
    }

    /// Takes one page from `items` (the matching items after the previous page, in listing
    /// order): the page, and the next page's token, "" when nothing follows.
    pub fn page<T>(&self, items: impl IntoIterator<Item = T>, key: impl Fn(&T) -> Vec<String>) -> (Vec<T>, String) {
        let mut items = items.into_iter();
        let page: Vec<T> = items.by_ref().take(self.size).collect();
        // A token only when something follows, so the last page says so with "".
        let next = match (items.next(), page.last()) {
            (Some(_), Some(last)) => {
                let key = key(last);
                self.token_after(&key.iter().map(String::as_str).collect::<Vec<_>>())
            }
            _ => String::new(),
        };
        (page, next)
    }
}

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Unpadded base64url; small enough not to pull a crate in.
pub(crate) fn base64url_encode(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let mut group = [0u8; 3];
        group[..chunk.len()].copy_from_slice(chunk);
        let bits = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
        // n input bytes make n + 1 output characters.
        for index in 0..=chunk.len() {
            text.push(char::from(BASE64URL[(bits >> (18 - 6 * index) & 63) as usize]));
        }
    }
    text
}

fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let value = |byte: u8| BASE64URL.iter().position(|&candidate| candidate == byte).map(|position| position as u32);
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3 + 2);
    for chunk in text.as_bytes().chunks(4) {
        // A lone trailing character carries fewer than 8 bits: never produced by the encoder.
        if chunk.len() < 2 {
            return None;
        }
        let mut bits = 0u32;
        for (index, &byte) in chunk.iter().enumerate() {
            bits |= value(byte)? << (18 - 6 * index);
        }
        for index in 0..chunk.len() - 1 {
            bytes.push((bits >> (16 - 8 * index)) as u8);
        }
    }
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::FieldViolation;

    fn violation(error: SimError) -> Vec<FieldViolation> {
        match error {
            SimError::InvalidArgument { violations, .. } => violations,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn base64url_round_trips_every_length() {
        for length in 0..10 {
            let bytes: Vec<u8> = (0..length).map(|index| (index * 37 + 250) as u8).collect();
            let text = base64url_encode(&bytes);
            assert!(text.bytes().all(|byte| BASE64URL.contains(&byte)), "{text}");
            assert_eq!(base64url_decode(&text), Some(bytes));
        }
        assert_eq!(base64url_encode(b"runner-1:1:1"), "cnVubmVyLTE6MTox");
        assert_eq!(base64url_decode("a"), None);
        assert_eq!(base64url_decode("a*bc"), None);
    }

    #[test]
    fn page_sizes_default_cap_and_refuse_negatives() {
        let size = |requested| Pager::new("things", [], requested, 50, 1000).map(|pager| pager.size());
        assert_eq!(size(0), Ok(50));
        assert_eq!(size(7), Ok(7));
        assert_eq!(size(5000), Ok(1000));
        assert_eq!(violation(size(-1).unwrap_err()), [FieldViolation::new("page_size", "must not be negative")]);
    }

    #[test]
    fn tokens_carry_the_listing_the_filters_and_the_last_key() {
        let pager = Pager::new("things", ["zone-a".to_owned()], 2, 50, 1000).unwrap();
        let (page, next) = pager.page(["a", "b", "c"], |item| vec![item.to_string()]);
        assert_eq!(page, ["a", "b"]);
        assert_eq!(pager.after(&next), Ok(Some(vec!["b".to_owned()])));
        let (page, next) = pager.page(["c"], |item| vec![item.to_string()]);
        assert_eq!((page, next), (vec!["c"], String::new()), "the last page has no token");

        let other_filters = Pager::new("things", ["zone-b".to_owned()], 2, 50, 1000).unwrap();
        let token = pager.token_after(&["b"]);
        assert_eq!(
            violation(other_filters.after(&token).unwrap_err()),
            [FieldViolation::new("page_token", "the page token belongs to a listing with other filters")]
        );
        let other_listing = Pager::new("others", ["zone-a".to_owned()], 2, 50, 1000).unwrap();
        for foreign in [other_listing.token_after(&["b"]), "runners:2".to_owned(), "%%".to_owned()] {
            assert_eq!(
                violation(pager.after(&foreign).unwrap_err()),
                [FieldViolation::new("page_token", "not a page token of this listing")],
                "{foreign}"
            );
        }
    }
}
