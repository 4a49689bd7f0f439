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

/// Deterministic content of message `i`, octet `j`: every bit of `i` and `j` counts
/// (MurmurHash3's 64-bit finalizer over both).
#[inline]
pub fn pattern_byte(i: u64, j: usize) -> u8 {
    let mut x = i ^ (j as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
    x ^= x >> 33;
    x = x.wrapping_mul(0xC4CE_B9FE_1A85_EC53);
    x ^= x >> 33;
    x as u8
}

/// The message number of the pong that answers ping `i`.
pub fn pong(i: u64) -> u64 {
    i | PONG
}

/// Fills `buf` with message `i`.
pub fn fill(buf: &mut [u8], i: u64) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(i, j);
    }
}

/// Octets of `buf` that are not message `i`.
pub fn mismatches(buf: &[u8], i: u64) -> u64 {
    buf.iter()
        .enumerate()
        .filter(|(j, b)| **b != pattern_byte(i, *j))
        .count() as u64
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

/// Octets of `buf` that are not write-bw message `i` (see [`fill_lap`]).
pub fn mismatches_lap(buf: &[u8], i: u64, slots: usize) -> u64 {
    let Some((last, body)) = buf.split_last() else {
        return 0;
    };
    mismatches(body, i) + u64::from(*last != lap_byte(i, slots))
}

/// The read region's octet at offset `off`.
#[inline]
pub fn region_byte(off: u64) -> u8 {
    pattern_byte(REGION_SEED, off as usize)
}

/// Fills `buf` as the read region from offset `off`.
pub fn fill_region(buf: &mut [u8], off: u64) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = region_byte(off + j as u64);
    }
}

/// Octets of `buf` that are not the region from offset `off`.
pub fn mismatches_region(buf: &[u8], off: u64) -> u64 {
    buf.iter()
        .enumerate()
        .filter(|(j, b)| **b != region_byte(off + *j as u64))
        .count() as u64
}

/// Fills `buf` with the complement of the region from `off`: every octet differs from
/// what a Read from `off` must place.
pub fn poison_region(buf: &mut [u8], off: u64) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = !region_byte(off + j as u64);
    }
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
        assert_eq!(mismatches_lap(&w, 300, 128), 0);
        assert_eq!(
            mismatches_lap(&w, 300 - 128, 128),
            64,
            "a stale message is all wrong"
        );
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
