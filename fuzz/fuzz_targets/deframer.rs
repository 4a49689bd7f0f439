//! Arbitrary bytes into the FPDU deframer (in order, in chunks the input chooses) and into
//! out-of-order recovery, in every FPDU mode.
#![no_main]

use dataplane::mpa::deframe::Deframer;
use dataplane::mpa::fpdu::FpduMode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let mode = FpduMode {
        markers: ctl & 1 != 0,
        crc: ctl & 2 != 0,
    };
    let origin = u64::from(ctl >> 2) * 4;
    let chunk = usize::from(ctl % 61) + 1;
    let mut d = Deframer::at_offset(mode, origin);
    let mut total = 0usize;
    d.recover_out_of_order(origin + 1 + u64::from(ctl), rest, |f| {
        assert!(f.ulpdu.len() <= f.wire_len);
    });
    for c in rest.chunks(chunk) {
        if d.push(c, |f| total += f.ulpdu.len()).is_err() {
            break;
        }
    }
    assert!(total <= rest.len());
});
