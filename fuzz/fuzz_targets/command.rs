//! The command rule never panics, and a JSON-array command round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use restore_hooks::hooks::command::parse_command;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else { return };
    match parse_command(value) {
        Ok(argv) if value.starts_with('[') => {
            let again = parse_command(&serde_json::to_string(&argv).unwrap()).unwrap();
            assert_eq!(argv, again);
        }
        Ok(argv) if value.is_empty() => assert!(argv.is_empty()),
        Ok(argv) => assert_eq!(argv, [value]),
        Err(_) => assert!(value.starts_with('[')),
    }
});
