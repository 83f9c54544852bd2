//! Go duration parsing never panics, and what it returns prints back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use restore_hooks::hooks::duration::parse_go_duration;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else { return };
    if let Ok(nanos) = parse_go_duration(value) {
        assert_eq!(parse_go_duration(&format!("{nanos}ns")), Ok(nanos), "{value:?}");
    }
});
