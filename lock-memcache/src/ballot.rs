//! What an election's item holds: `{owner} {term} {value}`, the leader's
//! owner token, its term and the value it proclaims, in one item so that
//! the value is granted, renewed and deleted with the lead itself.
//!
//! The mutex's and a permit's items hold the owner token alone; it has no
//! space (hex digits), so an item's owner is its value up to the first
//! space, whichever family it is of. The value is last: it may hold spaces
//! and line breaks (memcached's data blocks are counted, not delimited).

/// What the term field holds between the `add` that grants the lead and
/// the write that puts the term in: the term is the fence counter's value
/// drawn right behind the add, so it is not known when the add is sent.
const NOT_DRAWN: &str = "-";

/// An election's item, as read or to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ballot<'a> {
    pub(crate) owner: &'a str,
    /// `None` until the grant's term is written in.
    pub(crate) term: Option<u64>,
    pub(crate) value: &'a str,
}

impl<'a> Ballot<'a> {
    /// Reads an item's value; a field that is missing or not a number
    /// reads as empty or not drawn.
    pub(crate) fn read(item: &'a str) -> Self {
        let mut fields = item.splitn(3, ' ');
        let owner = fields.next().unwrap_or_default();
        let term = fields.next().and_then(|t| t.parse().ok());
        let value = fields.next().unwrap_or_default();
        Self { owner, term, value }
    }

    /// The item's value.
    pub(crate) fn write(&self) -> String {
        match self.term {
            Some(term) => format!("{} {term} {}", self.owner, self.value),
            None => format!("{} {NOT_DRAWN} {}", self.owner, self.value),
        }
    }
}

/// The owner token an item of any family names.
pub(crate) fn owner_of(item: &str) -> &str {
    item.split_once(' ').map_or(item, |(owner, _)| owner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ballot_reads_back_as_written() {
        for value in ["", "10.0.0.7:8080", "a b  c", "line\r\nbreak -"] {
            for term in [None, Some(0), Some(1_700_000_000_000_001)] {
                let ballot = Ballot {
                    owner: "0123abcd",
                    term,
                    value,
                };
                let item = ballot.write();
                assert_eq!(Ballot::read(&item), ballot, "{item:?}");
                assert_eq!(owner_of(&item), "0123abcd");
            }
        }
    }

    #[test]
    fn a_mutex_item_is_its_owner() {
        assert_eq!(owner_of("0123abcd"), "0123abcd");
        assert_eq!(Ballot::read("0123abcd").term, None);
    }
}
