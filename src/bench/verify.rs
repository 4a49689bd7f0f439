//! What `--verify` checks, and how: contents that depend on the message number and the
//! offset, so that a lost, stale, misplaced or reordered octet is caught.
//!
//! * Message `i` of a size holds [`pattern_byte`]`(i, j)` at octet `j`; a pong answering
//!   ping `i` holds the pattern of [`pong`]`(i)`.
//! * Write-bw messages land in a ring of slots on the server: message `i` in slot
//!   `i % slots`, its last octet the [`lap_byte`] of `i` (which differs from the message
//!   before it in the slot), written last and seen last (RDMA Write's "last octet visible
//!   last"), so the server knows when message `i` is whole, checks it, and only then hands
//!   the slot back.
//! * Reads come from a region whose contents depend on the offset ([`region_byte`]), at
//!   offsets that move with every read ([`read_offset`]), into a sink poisoned with the
//!   complement of what must arrive: a Read that placed nothing, or stale data, or data
//!   from the wrong offset, fails.

/// Seed of the read region's contents.
const REGION_SEED: u64 = 0x005E_ED0F_5EAD;
/// The bit that makes a pong's pattern differ from its ping's.
const PONG: u64 = 1 << 63;

/// Octets `8 k` to `8 k + 7` of the stream `seed` (little-endian): MurmurHash3's 64-bit
/// finalizer over both, so every bit of `seed` and `k` counts. One mix gives eight
/// octets, which keeps `--verify` from costing more than the transfer it checks.
#[inline]
fn word(seed: u64, k: u64) -> u64 {
    let mut x = seed ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    x = x.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    x ^= x >> 33;
    x
}

/// Deterministic content of message `i`, octet `j`: octet `j % 8` (little-endian) of
/// MurmurHash3's 64-bit finalizer over `i` and `j / 8`, so every bit of both counts.
#[inline]
pub fn pattern_byte(i: u64, j: usize) -> u8 {
    word(i, j as u64 / 8).to_le_bytes()[j % 8]
}

/// Walks the stream `seed` from octet `start` along `len` octets, one word at a time:
/// `piece(at, expected)` for each run of octets within one word (`at`: its offset from
/// `start`; `expected`: the stream's octets there).
#[inline]
fn walk(seed: u64, start: u64, len: usize, mut piece: impl FnMut(usize, &[u8])) {
    let mut at = 0;
    while at < len {
        let pos = start + at as u64;
        let skip = (pos % 8) as usize;
        let n = (8 - skip).min(len - at);
        piece(at, &word(seed, pos / 8).to_le_bytes()[skip..skip + n]);
        at += n;
    }
}

/// Fills `buf` with the stream `seed` from octet `start`, each octet XORed with `mask`.
fn fill_stream(buf: &mut [u8], seed: u64, start: u64, mask: u8) {
    walk(seed, start, buf.len(), |at, want| {
        for (b, w) in buf[at..at + want.len()].iter_mut().zip(want) {
            *b = w ^ mask;
        }
    });
}

/// Octets of `buf` that differ from the stream `seed` from octet `start`.
fn mismatches_stream(buf: &[u8], seed: u64, start: u64) -> u64 {
    let mut wrong = 0;
    walk(seed, start, buf.len(), |at, want| {
        let got = &buf[at..at + want.len()];
        // A whole word compares as one integer (a slice compare would call memcmp).
        let same = match (<[u8; 8]>::try_from(got), <[u8; 8]>::try_from(want)) {
            (Ok(g), Ok(w)) => u64::from_ne_bytes(g) == u64::from_ne_bytes(w),
            _ => false,
        };
        if !same {
            wrong += got.iter().zip(want).filter(|(g, w)| g != w).count() as u64;
        }
    });
    wrong
}

/// The message number of the pong that answers ping `i`.
pub fn pong(i: u64) -> u64 {
    i | PONG
}

/// Fills `buf` with message `i`.
pub fn fill(buf: &mut [u8], i: u64) {
    fill_stream(buf, i, 0, 0);
}

/// Fills `buf` with octets `at` onwards of message `i` (a piece of a long message).
pub fn fill_at(buf: &mut [u8], i: u64, at: usize) {
    fill_stream(buf, i, at as u64, 0);
}

/// Octets of `buf` that are not message `i`.
pub fn mismatches(buf: &[u8], i: u64) -> u64 {
    mismatches_stream(buf, i, 0)
}

/// Octets of `buf` that are not octets `at` onwards of message `i`.
pub fn mismatches_at(buf: &[u8], i: u64, at: usize) -> u64 {
    mismatches_stream(buf, i, at as u64)
}

/// The last octet of write-bw message `i` in a ring of `slots` slots: never 0, and never
/// the value of the message before it in the same slot (`i - slots`).
pub fn lap_byte(i: u64, slots: usize) -> u8 {
    ((i / slots.max(1) as u64) % 255 + 1) as u8
}

/// Write-bw message `i` of `size` octets for a ring of `slots`: the pattern, then the lap
/// byte as the last octet.
pub fn fill_lap(buf: &mut [u8], i: u64, slots: usize) {
    fill(buf, i);
    if let Some(last) = buf.last_mut() {
        *last = lap_byte(i, slots);
    }
}

/// The read region's octet at offset `off`.
#[inline]
pub fn region_byte(off: u64) -> u8 {
    pattern_byte(REGION_SEED, off as usize)
}

/// Fills `buf` as the read region from offset `off`.
pub fn fill_region(buf: &mut [u8], off: u64) {
    fill_stream(buf, REGION_SEED, off, 0);
}

/// Octets of `buf` that are not the region from offset `off`.
pub fn mismatches_region(buf: &[u8], off: u64) -> u64 {
    mismatches_stream(buf, REGION_SEED, off)
}

/// Fills `buf` with the complement of the region from `off`: every octet differs from
/// what a Read from `off` must place.
pub fn poison_region(buf: &mut [u8], off: u64) {
    fill_stream(buf, REGION_SEED, off, 0xFF);
}

/// Slack at the end of the read region for the moving alignment of [`read_offset`].
pub const READ_SLACK: usize = 8;

/// Slots of the read region for a test with `depth` messages in flight (read-lat: one):
/// one more than Reads in flight, so each Read comes from a slot the Read before it in
/// the same sink slot did not.
pub fn region_slots(latency: bool, depth: usize) -> usize {
    if latency {
        2
    } else {
        depth + 1
    }
}

/// Where Read `i` of `size` octets starts in a region of `slots` slots (plus
/// [`READ_SLACK`]): a different slot each time (so the sink slot it lands in held another
/// offset's data before) and a moving alignment.
pub fn read_offset(i: u64, size: usize, slots: usize) -> u64 {
    (i % slots.max(1) as u64) * size as u64 + (i % READ_SLACK as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The word-at-a-time fill and check agree with the octet-by-octet definition
        /// ([`pattern_byte`]) at any start and length, and count exactly the octets that
        /// were changed.
        #[test]
        fn streams_match_the_octet_definition(
            seed in any::<u64>(),
            start in 0u64..10_000,
            len in 0usize..200,
            flips in proptest::collection::btree_set(0usize..200, 0..10),
        ) {
            let mut buf = vec![0u8; len];
            fill_stream(&mut buf, seed, start, 0);
            let want: Vec<u8> = (0..len).map(|j| pattern_byte(seed, start as usize + j)).collect();
            prop_assert_eq!(&buf, &want);
            prop_assert_eq!(mismatches_stream(&buf, seed, start), 0);
            let flips: Vec<usize> = flips.into_iter().filter(|&j| j < len).collect();
            for &j in &flips {
                buf[j] ^= 1 << (j % 8);
            }
            prop_assert_eq!(mismatches_stream(&buf, seed, start), flips.len() as u64);
            fill_stream(&mut buf, seed, start, 0xFF);
            prop_assert_eq!(mismatches_stream(&buf, seed, start), len as u64);
        }
    }

    #[test]
    fn lap_bytes_differ_from_the_previous_message_in_the_slot() {
        for slots in [1usize, 2, 7, 128] {
            for i in slots as u64..5000 {
                assert_ne!(lap_byte(i, slots), lap_byte(i - slots as u64, slots));
                assert_ne!(lap_byte(i, slots), 0);
            }
        }
    }

    #[test]
    fn every_bit_of_the_message_number_changes_the_pattern() {
        for bit in 0..64 {
            let a: Vec<u8> = (0..64).map(|j| pattern_byte(0, j)).collect();
            let b: Vec<u8> = (0..64).map(|j| pattern_byte(1 << bit, j)).collect();
            assert!(
                a.iter().zip(&b).filter(|(x, y)| x != y).count() > 40,
                "bit {bit}"
            );
        }
    }

    #[test]
    fn patterns_depend_on_message_and_offset() {
        let mut a = vec![0u8; 4096];
        fill(&mut a, 5);
        assert_eq!(mismatches(&a, 5), 0);
        assert!(mismatches(&a, 6) > 4000);
        assert!(mismatches(&a, pong(5)) > 4000);
        let mut p = vec![0u8; 1000];
        poison_region(&mut p, 17);
        assert_eq!(mismatches_region(&p, 17), 1000);
        fill_region(&mut p, 17);
        assert_eq!(mismatches_region(&p, 17), 0);
        assert!(mismatches_region(&p, 18) > 950);
        let mut w = vec![0u8; 64];
        fill_lap(&mut w, 300, 128);
        let (last, body) = w.split_last().unwrap();
        assert_eq!((mismatches(body, 300), *last), (0, lap_byte(300, 128)));
        // A stale message (the slot's one before): its lap octet is wrong, and so is its
        // pattern nearly everywhere (an octet of two patterns agrees one time in 256).
        assert_ne!(*last, lap_byte(300 - 128, 128));
        let differ = (0..63)
            .filter(|&j| pattern_byte(300, j) != pattern_byte(300 - 128, j))
            .count() as u64;
        assert!(differ > 58, "{differ}");
        assert_eq!(mismatches(body, 300 - 128), differ);
    }

    #[test]
    fn read_offsets_move() {
        let slots = 5;
        let size = 100;
        for i in 4..1000u64 {
            // Read i lands in sink slot i % depth (depth = slots - 1): that slot last held
            // read i - depth, from another offset.
            let depth = slots as u64 - 1;
            assert_ne!(
                read_offset(i, size, slots),
                read_offset(i - depth, size, slots)
            );
            assert!(read_offset(i, size, slots) as usize + size <= slots * size + READ_SLACK);
        }
    }
}
